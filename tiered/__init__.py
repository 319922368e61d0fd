"""Tiered storage (KIP-405): the remote tier below `storage` and above nothing of the broker.

Layered between `storage` and `server`: it may import `storage` and `protocol`, never
`server`; `storage` knows nothing of it.
"""
