"""Kafka's 32-bit murmur2 hash (``Utils.murmur2``) and ``Utils.toPositive``.

Kafka hashes record keys with it to choose a partition (the default partitioner), and
a user partition's identity with it to choose its ``__remote_log_metadata`` partition
(RemoteLogMetadataTopicPartitioner): every broker must agree with Kafka's on the result,
so this follows Java's int arithmetic exactly (32-bit wrap-around, ``>>>`` as a logical
shift of the unsigned value, the tail bytes folded as the fall-through switch does).
"""

from __future__ import annotations

from typing import Final

__all__ = ["murmur2", "to_positive"]

_SEED: Final = 0x9747B28C
_M: Final = 0x5BD1E995
_R: Final = 24
_MASK: Final = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """The hash as Java's signed int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    body = length - length % 4
    for i in range(0, body, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> _R
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length % 4
    if tail == 3:
        h ^= data[body + 2] << 16
    if tail >= 2:
        h ^= data[body + 1] << 8
    if tail >= 1:
        h ^= data[body]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Kafka's Utils.toPositive: the int with its sign bit cleared (not abs(), which
    overflows on Integer.MIN_VALUE)."""
    return number & 0x7FFFFFFF
