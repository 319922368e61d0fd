"""Helpers for the KIP-848 consumer group tests on the in-memory __consumer_offsets of
`group_support`: topics in the coordinator's metadata, heartbeats, and the consumer group
records a group wrote."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from group_support import FakeReplicaManager

from tiercel.protocol.compression import decompress
from tiercel.protocol.errors import ErrorCode
from tiercel.protocol.record_batch import RECORDS_OFFSET, iter_batches
from tiercel.protocol.records import decode_records
from tiercel.server.coordinator.group.consumer_group_records import (
    ConsumerGroupKey,
    ConsumerGroupValue,
    decode_consumer_group_key,
    decode_consumer_group_value,
)
from tiercel.server.coordinator.group.group_coordinator import GroupCoordinator
from tiercel.server.coordinator.group.modern.assignment import Assignment
from tiercel.server.coordinator.group.modern.consumer_group import ConsumerGroup
from tiercel.server.coordinator.group.modern.consumer_group_coordinator import HeartbeatOutcome
from tiercel.server.coordinator.group.modern.heartbeat_request import (
    HeartbeatRequest,
    HeartbeatResult,
)
from tiercel.server.metadata.metadata_cache import TopicMetadata


def add_topic(c: GroupCoordinator, name: str, partitions: int) -> uuid.UUID:
    topic_id = uuid.uuid4()
    c.manager.metadata_cache.put_topic(
        TopicMetadata(name, topic_id, {p: (1,) for p in range(partitions)})
    )
    return topic_id


def group(c: GroupCoordinator, group_id: str = "g") -> ConsumerGroup:
    found = c.manager.groups[group_id]
    assert isinstance(found, ConsumerGroup)
    return found


@dataclass
class Member:
    """A client's view of its membership; `beat` acts on the last assignment."""

    c: GroupCoordinator
    member_id: str
    group_id: str = "g"
    topics: tuple[str, ...] = ("t",)
    regex: str | None = None
    instance_id: str | None = None
    assignor: str | None = None
    rebalance_timeout_ms: int = 5000
    epoch: int = 0
    owned: Assignment = field(default_factory=dict)
    told: Assignment | None = None

    async def join(self) -> HeartbeatResult:
        self.epoch = 0
        self.owned = {}
        self.told = None
        return await self.beat()

    async def beat(self, act: bool = True) -> HeartbeatResult:
        """Heartbeat; with ``act`` the client first, and again after the response, takes
        what it was told (revoking what it lost); without, it keeps what it had."""
        self._act(act)
        outcome = await self.send(self.epoch)
        assert outcome.error is ErrorCode.none, (self.member_id, outcome)
        result = outcome.result
        assert result is not None
        self.epoch = result.member_epoch
        if result.assignment is not None:
            self.told = result.assignment
        self._act(act)
        return result

    def _act(self, act: bool) -> None:
        if act and self.told is not None:
            self.owned = dict(self.told)
            self.told = None

    async def send(self, epoch: int, owned: Assignment | None = None) -> HeartbeatOutcome:
        joining = epoch == 0
        request = HeartbeatRequest(
            self.group_id,
            self.member_id,
            epoch,
            instance_id=self.instance_id,
            rebalance_timeout_ms=self.rebalance_timeout_ms if joining else -1,
            subscribed_topic_names=self.topics if joining else None,
            subscribed_topic_regex=self.regex if joining else None,
            server_assignor=self.assignor if joining else None,
            owned_partitions=owned if owned is not None else ({} if joining else self.owned),
            client_id="client",
            client_host="/127.0.0.1",
        )
        return await self.c.consumer_group_heartbeat(request)

    async def leave(self, epoch: int = -1) -> HeartbeatOutcome:
        request = HeartbeatRequest(
            self.group_id, self.member_id, epoch, instance_id=self.instance_id
        )
        return await self.c.consumer_group_heartbeat(request)


async def settle(members: list[Member], rounds: int = 6) -> None:
    """Everybody heartbeats and acts on what it is told until nothing moves."""
    for _ in range(rounds):
        for member in members:
            await member.beat()


def partitions_of(member: Member, topic_id: uuid.UUID) -> set[int]:
    return set(member.owned.get(topic_id, ()))


def consumer_records(
    replicas: FakeReplicaManager, c: GroupCoordinator, group_id: str = "g"
) -> list[tuple[ConsumerGroupKey, ConsumerGroupValue | None]]:
    """The consumer group records of the group's partition, in log order."""
    out = []
    log = replicas.log_for(group_id, c.manager)
    for pos, header in iter_batches(log.data):
        body = decompress(
            header.compression, log.data[pos + RECORDS_OFFSET : pos + header.size_in_bytes]
        )
        for record in decode_records(body, header.records_count):
            assert record.key is not None
            key = decode_consumer_group_key(record.key)
            if key is None or key.group != group_id:
                continue
            value = None if record.value is None else decode_consumer_group_value(key, record.value)
            out.append((key, value))
    return out
