"""A group coordinator on an in-memory __consumer_offsets, for the coordinator unit tests.

`FakeReplicaManager` takes the coordinator's appends (offsets assigned as a log would)
and serves them back through `FakeLog.read` in whole batches, so a second coordinator
built on the same fakes loads what the first one wrote: a broker restart in miniature.
"""

from __future__ import annotations

import asyncio
import struct
import types
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from tiercel.protocol.compression import decompress
from tiercel.protocol.errors import KafkaError
from tiercel.protocol.record_batch import RECORDS_OFFSET, iter_batches, read_header, set_base_offset
from tiercel.protocol.records import decode_records
from tiercel.server.coordinator.group.coordinator_records import (
    GroupMetadataKey,
    OffsetCommitKey,
    decode_key,
)
from tiercel.server.coordinator.group.group_config import (
    GROUP_METADATA_TOPIC_NAME,
    GroupCoordinatorConfig,
)
from tiercel.server.coordinator.group.group_coordinator import GroupCoordinator
from tiercel.server.coordinator.group.group_join import JoinGroupParams
from tiercel.server.coordinator.group.group_metadata_manager import GroupMetadataManager
from tiercel.server.metadata.metadata_cache import MetadataCache, TopicMetadata
from tiercel.server.replica_manager import ProduceResult, ReplicaManager
from tiercel.storage.log_values import FetchDataInfo, FetchIsolation, LogOffsetMetadata
from tiercel.storage.producer_state import ProducerStateManager
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.topic_partition import TopicPartition

PARTITIONS = 4
NOW = 1_700_000_000_000


class FakeLog:
    """Whole batches at consecutive offsets. Its producer state (which TxnOffsetCommit
    asks for a producer's next sequence) is a real one that no append updates: every
    transactional commit starts at sequence 0."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.producer_state = ProducerStateManager(
            TopicPartition(GROUP_METADATA_TOPIC_NAME, 0), "unused"
        )

    def append(self, batch: bytes) -> int:
        base = self.log_end_offset
        patched = bytearray(batch)
        set_base_offset(patched, 0, base)
        self.data += patched
        self.log_end_offset = read_header(patched, 0).next_offset
        return base

    def read(
        self, offset: int, max_length: int, isolation: FetchIsolation, min_one: bool
    ) -> FetchDataInfo:
        start = end = None
        for pos, header in iter_batches(self.data):
            if start is None and header.next_offset > offset:
                start = pos
            if start is not None:
                batch_end = pos + header.size_in_bytes
                if end is not None and batch_end - start > max_length:
                    break
                end = batch_end
        chunk = b"" if start is None or end is None else bytes(self.data[start:end])
        return FetchDataInfo(LogOffsetMetadata(offset), chunk)

    def records(self) -> list[tuple[OffsetCommitKey | GroupMetadataKey, bytes | None]]:
        """(key, value) of every record, in log order."""
        out = []
        for pos, header in iter_batches(self.data):
            body = decompress(
                header.compression, self.data[pos + RECORDS_OFFSET : pos + header.size_in_bytes]
            )
            for record in decode_records(body, header.records_count):
                assert record.key is not None
                key = decode_key(record.key)
                assert isinstance(key, OffsetCommitKey | GroupMetadataKey)
                out.append((key, record.value))
        return out


@dataclass
class FakePartition:
    log: FakeLog = field(default_factory=FakeLog)
    is_leader: bool = True


class FakeReplicaManager:
    """Appends to the in-memory logs. `hold` makes the next append wait, once its batch
    is in the log, until the returned event is set (a write waiting for its followers);
    `held` tells that it waits."""

    def __init__(self) -> None:
        self.partitions = {
            TopicPartition(GROUP_METADATA_TOPIC_NAME, p): FakePartition() for p in range(PARTITIONS)
        }
        self.fail_with: KafkaError | None = None
        self.internal_flags: list[bool] = []
        self.required_acks: list[int] = []
        # No transaction.partition.verification here: the coordinator's own checks.
        self.transaction_verifier = None
        self.held = asyncio.Event()
        self._gate: asyncio.Event | None = None

    def hold(self) -> asyncio.Event:
        self._gate = release = asyncio.Event()
        return release

    async def append_records(
        self,
        timeout_ms: int,
        required_acks: int,
        entries: dict[TopicPartition, bytes | None],
        internal_topics_allowed: bool = False,
        verification_guards: object = None,
    ) -> dict[TopicPartition, ProduceResult]:
        await asyncio.sleep(0)  # a real append may yield to the loop
        self.internal_flags.append(internal_topics_allowed)
        self.required_acks.append(required_acks)
        results = {}
        for tp, batch in entries.items():
            if self.fail_with is not None:
                results[tp] = ProduceResult(self.fail_with)
                continue
            assert batch is not None
            first = self.partitions[tp].log.append(batch)
            info = types.SimpleNamespace(first_offset=first)
            results[tp] = ProduceResult(info=cast(Any, info))
        gate, self._gate = self._gate, None
        if gate is not None:
            self.held.set()
            await gate.wait()
        return results

    def log_for(self, group_id: str, manager: GroupMetadataManager) -> FakeLog:
        tp = TopicPartition(GROUP_METADATA_TOPIC_NAME, manager.partition_for(group_id))
        return self.partitions[tp].log


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> int:
        return self.now


def coordinator_config(**overrides: Any) -> GroupCoordinatorConfig:
    values: dict[str, Any] = {
        "offsets_topic_num_partitions": PARTITIONS,
        "group_min_session_timeout_ms": 10,
        "group_initial_rebalance_delay_ms": 0,
        "offsets_retention_ms": 60_000,
        "offsets_retention_check_interval_ms": 3_600_000,
    }
    values.update(overrides)
    return GroupCoordinatorConfig(**values)


def metadata_cache() -> MetadataCache:
    cache = MetadataCache(1, "cluster")
    cache.put_topic(
        TopicMetadata(
            GROUP_METADATA_TOPIC_NAME,
            uuid.uuid4(),
            {p: (1,) for p in range(PARTITIONS)},
        )
    )
    return cache


async def start_coordinator(
    replicas: FakeReplicaManager,
    scheduler: Scheduler,
    config: GroupCoordinatorConfig,
    clock: Clock,
) -> GroupCoordinator:
    """A coordinator that leads (and has loaded) every partition."""
    manager = GroupMetadataManager(
        config, cast(ReplicaManager, replicas), metadata_cache(), scheduler, clock
    )
    coordinator = GroupCoordinator(config, manager, scheduler)
    coordinator.startup()
    for tp in replicas.partitions:
        coordinator.on_leadership_change(tp, 0)
    while manager.is_loading:
        await asyncio.sleep(0.001)
    return coordinator


def subscription(topics: Sequence[str]) -> bytes:
    """A ConsumerProtocolSubscription v0: version, topics, null user data."""
    out = bytearray(struct.pack(">hi", 0, len(topics)))
    for topic in topics:
        out += struct.pack(">h", len(topic)) + topic.encode()
    return bytes(out + struct.pack(">i", -1))


def join_params(
    group_id: str = "g",
    member_id: str = "",
    *,
    instance_id: str | None = None,
    session_ms: int = 10_000,
    rebalance_ms: int = 10_000,
    protocols: tuple[tuple[str, bytes], ...] | None = None,
    require_known: bool = False,
    skip_assignment: bool = True,
    client_id: str = "client",
) -> JoinGroupParams:
    return JoinGroupParams(
        group_id=group_id,
        member_id=member_id,
        group_instance_id=instance_id,
        require_known_member_id=require_known,
        support_skipping_assignment=skip_assignment,
        client_id=client_id,
        client_host="/127.0.0.1",
        rebalance_timeout_ms=rebalance_ms,
        session_timeout_ms=session_ms,
        protocol_type="consumer",
        protocols=protocols or (("range", subscription(["t"])),),
    )
