"""The broker tail's functions (`tiercel.tiered.reader.broker_tail`), imported only when
``kafka.bootstrap.servers`` is set: a read of the tier alone needs no Kafka client."""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import cast

import pyarrow as pa

from tiercel.tiered.reader.client_security import ClientSecurity

__all__ = [
    "BrokerTailUnavailableError",
    "describe_topics",
    "high_watermarks",
    "log_start_offsets",
    "read_broker_range",
]


class BrokerTailUnavailableError(RuntimeError):
    """``kafka.bootstrap.servers`` was given to an installation without the broker tail."""


def _module() -> ModuleType:
    try:
        return importlib.import_module("tiercel.tiered.reader.broker_tail")
    except ModuleNotFoundError as e:
        if e.name != "tiercel.tiered.reader.broker_tail":
            raise  # the module is there but something it needs is not
        raise BrokerTailUnavailableError(
            "kafka.bootstrap.servers: this Tiercel has no broker tail "
            "(tiercel.tiered.reader.broker_tail); read the tier alone without the option"
        ) from e


def describe_topics(
    bootstrap_servers: str, topics: Sequence[str] | None, security: ClientSecurity
) -> dict[str, tuple[str, list[int]]]:
    """Topic -> its topic id and sorted partition ids (None: every non-internal topic)."""
    described = _module().describe_topics_with_ids(bootstrap_servers, topics, security=security)
    return {topic: (d.topic_id, d.partitions) for topic, d in described.items()}


def high_watermarks(
    bootstrap_servers: str,
    topic: str,
    partitions: Sequence[int],
    security: ClientSecurity,
    read_committed: bool = False,
) -> dict[int, int]:
    """The high watermarks, or the last stable offsets when ``read_committed``."""
    return cast(
        dict[int, int],
        _module().high_watermarks(
            bootstrap_servers, topic, partitions, read_committed=read_committed, security=security
        ),
    )


def log_start_offsets(
    bootstrap_servers: str, topic: str, partitions: Sequence[int], security: ClientSecurity
) -> dict[int, int]:
    return cast(
        dict[int, int],
        _module().log_start_offsets(bootstrap_servers, topic, partitions, security=security),
    )


def read_broker_range(
    bootstrap_servers: str,
    topic: str,
    partition: int,
    first_offset: int,
    last_offset: int,
    include_headers: bool,
    read_committed: bool,
    security: ClientSecurity,
) -> Iterator[pa.RecordBatch]:
    """Offsets ``first_offset`` to ``last_offset`` (inclusive) read from the brokers."""
    return cast(
        Iterator[pa.RecordBatch],
        _module().read_broker_range(
            bootstrap_servers,
            topic,
            partition,
            first_offset,
            last_offset,
            include_headers,
            read_committed=read_committed,
            security=security,
        ),
    )
