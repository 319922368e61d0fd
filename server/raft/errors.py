"""The Raft client's own failures (Kafka's ``org.apache.kafka.raft.errors``): not wire
errors, but what callers of the client API catch."""

from __future__ import annotations

__all__ = ["NotLeaderError", "RaftError", "UnexpectedBaseOffsetError"]


class RaftError(Exception):
    """Kafka's ``RaftException``."""


class NotLeaderError(RaftError):
    """An append or resignation asked of a replica that is not the leader of the epoch
    given (Kafka's ``NotLeaderException``): the caller has yet to see a leader change."""


class UnexpectedBaseOffsetError(RaftError):
    """A leader append whose first offset is not the log end offset (Kafka's
    ``UnexpectedBaseOffsetException``)."""
