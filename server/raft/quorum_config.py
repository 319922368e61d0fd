"""The Raft client's settings (Kafka's ``QuorumConfig``), already parsed: the broker maps
its ``controller.quorum.*`` keys onto this value.

    controller.quorum.voters              id@host:port,...   (static quorum, kraft.version 0)
    controller.quorum.bootstrap.servers   host:port,...      (where observers look first)
    controller.quorum.election.timeout.ms       1000
    controller.quorum.election.backoff.max.ms   1000
    controller.quorum.fetch.timeout.ms          2000
    controller.quorum.request.timeout.ms        2000
    controller.quorum.retry.backoff.ms            20
    controller.quorum.append.linger.ms            25
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tiercel.server.raft.endpoints import HostPort

__all__ = ["QuorumConfig"]


@dataclass(frozen=True, slots=True)
class QuorumConfig:
    """Invariants: timeouts are non-negative; with no static voters there must be
    bootstrap servers (Kafka: "Missing kraft bootstrap servers"). A value; safe anywhere."""

    voters: Mapping[int, HostPort] = field(default_factory=dict)
    bootstrap_servers: Sequence[HostPort] = ()
    election_timeout_ms: int = 1000
    election_backoff_max_ms: int = 1000
    fetch_timeout_ms: int = 2000
    request_timeout_ms: int = 2000
    retry_backoff_ms: int = 20
    append_linger_ms: int = 25

    def __post_init__(self) -> None:
        for name in (
            "election_timeout_ms",
            "election_backoff_max_ms",
            "fetch_timeout_ms",
            "request_timeout_ms",
            "retry_backoff_ms",
            "append_linger_ms",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"controller.quorum.{name[:-3].replace('_', '.')}.ms < 0")
        if not self.voters and not self.bootstrap_servers:
            # Kafka's KafkaRaftClient.initialize.
            raise ValueError(
                "Missing kraft bootstrap servers. Must specify a value for "
                "controller.quorum.bootstrap.servers."
            )
