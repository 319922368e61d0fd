"""Replication: the follower side (replica fetchers) and the leader's ISR writes."""
