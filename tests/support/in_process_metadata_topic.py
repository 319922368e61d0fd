"""A ``__remote_log_metadata`` topic held in lists, with `RemoteLogMetadataTopicClient`s
over it: for unit tests of the topic-based RemoteLogMetadataManager, whose own logic
(serde, partitioner, consumer, snapshots) then runs for real. Several managers may share
one topic, as brokers share the real one. Event-loop only."""

from __future__ import annotations

import asyncio

from tiercel.tiered.rlmm.remote_log_metadata_topic_client import MetadataFetch
from tiercel.tiered.rsm.remote_storage_manager import RemoteStorageError


class InProcessMetadataTopic:
    def __init__(self, num_partitions: int) -> None:
        self.num_partitions = num_partitions
        self.logs: list[list[tuple[int, bytes]]] = [[] for _ in range(num_partitions)]
        self.log_start = [0] * num_partitions
        self.created = False
        # Fault injection: fetches that fail before one succeeds; a produce that hangs.
        self.failing_fetches = 0
        self.produce_hangs = False
        # Every fetch as (client name, metadata partition, offset asked).
        self.fetches: list[tuple[str, int, int]] = []
        self._appended = asyncio.Event()

    def end_offset(self, metadata_partition: int) -> int:
        log = self.logs[metadata_partition]
        return log[-1][0] + 1 if log else self.log_start[metadata_partition]

    def append(self, metadata_partition: int, value: bytes) -> int:
        offset = self.end_offset(metadata_partition)
        self.logs[metadata_partition].append((offset, value))
        self._appended.set()
        self._appended = asyncio.Event()
        return offset

    def client(self, name: str) -> InProcessMetadataTopicClient:
        return InProcessMetadataTopicClient(self, name)


class InProcessMetadataTopicClient:
    def __init__(self, topic: InProcessMetadataTopic, name: str) -> None:
        self._topic = topic
        self._name = name
        self.closed = False

    @property
    def num_partitions(self) -> int:
        return self._topic.num_partitions

    async def ensure_topic(self) -> None:
        self._topic.created = True

    async def produce(self, metadata_partition: int, value: bytes) -> int:
        self._check()
        if self._topic.produce_hangs:
            await asyncio.Event().wait()
        return self._topic.append(metadata_partition, value)

    async def fetch(self, metadata_partition: int, offset: int, max_wait_ms: int) -> MetadataFetch:
        self._check()
        topic = self._topic
        topic.fetches.append((self._name, metadata_partition, offset))
        if topic.failing_fetches > 0:
            topic.failing_fetches -= 1
            raise RemoteStorageError("injected fetch failure")
        start = max(offset, topic.log_start[metadata_partition])
        if start >= topic.end_offset(metadata_partition):
            try:
                async with asyncio.timeout(max_wait_ms / 1000):
                    await topic._appended.wait()
            except TimeoutError:
                pass
        records = [(o, v) for o, v in topic.logs[metadata_partition] if o >= start]
        end = topic.end_offset(metadata_partition)
        return MetadataFetch(records, records[-1][0] + 1 if records else start, end)

    async def close(self) -> None:
        self.closed = True

    def _check(self) -> None:
        if not self._topic.created:
            raise RemoteStorageError("__remote_log_metadata does not exist")
        if self.closed:
            raise RemoteStorageError("client closed")
