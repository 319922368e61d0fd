"""Reading ``__remote_log_metadata`` into this broker's view (Kafka's ConsumerTask).

The user partitions this broker leads or follows are *assigned*; each maps to one
metadata partition (`RemoteLogMetadataTopicPartitioner`), and the metadata partitions
they map to are read, each with one fetch in flight (a long poll), by one task that
applies every record of an assigned user partition to the `RemotePartitionMetadataStore`
and skips the others.

A user partition newly assigned needs every event of its metadata partition: its view
starts empty and the metadata partition is read again from the start (Kafka's
seekToBeginning), or from just after a snapshot's offset when a snapshot holds the
partition's view (`remote_log_metadata_snapshot_file`). Rewinding re-reads records the
other user partitions already have; each remembers the last offset applied to it
(``applied_offset``) and skips those, as Kafka's readOffsetsByUserTopicPartition does.

A user partition is ready (`is_ready`, Kafka's markInitialized) once its metadata
partition has been read up to the high watermark that the first fetch after its
assignment reported. A record that does not decode or apply is logged and skipped: it
must not stop the task. A failed fetch is retried after an exponential backoff with
jitter.

Event-loop only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from dataclasses import dataclass
from typing import Final

from tiercel.config.logging_setup import log_event
from tiercel.storage.topic_partition import TopicIdPartition
from tiercel.tiered.rlmm.remote_log_metadata_manager import RemotePartitionDeleteMetadata
from tiercel.tiered.rlmm.remote_log_metadata_serde import deserialize
from tiercel.tiered.rlmm.remote_log_metadata_snapshot_file import (
    MetadataPartitionSnapshot,
    PartitionView,
)
from tiercel.tiered.rlmm.remote_log_metadata_topic_client import (
    MetadataFetch,
    RemoteLogMetadataTopicClient,
)
from tiercel.tiered.rlmm.remote_log_metadata_topic_partitioner import (
    RemoteLogMetadataTopicPartitioner,
)
from tiercel.tiered.rlmm.remote_log_segment_metadata_snapshot import (
    RemoteLogSegmentMetadataSnapshot,
)
from tiercel.tiered.rlmm.remote_partition_metadata_store import RemotePartitionMetadataStore
from tiercel.tiered.rsm.remote_storage_manager import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteStorageError,
)

__all__ = ["ConsumerTask"]

_log: Final = logging.getLogger("tiercel.rlmm")


@dataclass(slots=True)
class _UserPartition:
    """An assigned user partition. ``applied_offset``: records of this partition at or
    below it are in the view already. ``target``: the high watermark to reach before it
    is ready, None until a fetch after the assignment has reported one."""

    metadata_partition: int
    applied_offset: int
    target: int | None = None
    ready: bool = False


@dataclass(slots=True)
class _MetadataPartition:
    """A metadata partition being read. ``position``: the next offset to fetch; every
    record below it has been processed. ``generation`` grows whenever the reading
    restarts (rewind, new assignment): a fetch of an older generation is discarded."""

    position: int
    generation: int = 0
    failures: int = 0
    retry_at: float = 0.0


class ConsumerTask:
    """See the module docstring. Invariants: every user partition's metadata partition
    is in ``_metadata``, and every metadata partition there has a user partition."""

    def __init__(
        self,
        client: RemoteLogMetadataTopicClient,
        store: RemotePartitionMetadataStore,
        partitioner: RemoteLogMetadataTopicPartitioner,
        fetch_max_wait_ms: int,
        retry_backoff_ms: int,
        retry_backoff_max_ms: int,
        snapshots: dict[int, MetadataPartitionSnapshot] | None = None,
    ) -> None:
        self._client = client
        self._store = store
        self._partitioner = partitioner
        self._fetch_max_wait_ms = fetch_max_wait_ms
        self._retry_backoff_s = retry_backoff_ms / 1000
        self._retry_backoff_max_s = retry_backoff_max_ms / 1000
        # Views read at start-up, taken when their partition is assigned.
        self._snapshots = snapshots if snapshots is not None else {}
        self._users: dict[TopicIdPartition, _UserPartition] = {}
        self._metadata: dict[int, _MetadataPartition] = {}
        self._fetches: dict[int, asyncio.Task[tuple[int, MetadataFetch]]] = {}
        self._wakeup = asyncio.Event()
        self._progress = asyncio.Event()

    # -- assignment (Kafka's addAssignmentsForPartitions / removeAssignmentsForPartitions)

    def add_assignments(self, partitions: set[TopicIdPartition]) -> None:
        for partition in partitions:
            if partition not in self._users:
                self._assign(partition)
        self._wakeup.set()

    def _assign(self, partition: TopicIdPartition) -> None:
        metadata_partition = self._partitioner.metadata_partition(partition)
        snapshot = self._snapshots.get(metadata_partition)
        view = snapshot.partitions.pop(partition, None) if snapshot is not None else None
        if snapshot is not None and view is not None and self._load_view(partition, view):
            applied_offset = snapshot.consumed_offset
        else:
            self._store.drop_partition(partition)
            self._store.maybe_load_partition(partition)
            applied_offset = -1
        self._users[partition] = _UserPartition(metadata_partition, applied_offset)
        start = applied_offset + 1
        state = self._metadata.get(metadata_partition)
        if state is None:
            self._metadata[metadata_partition] = _MetadataPartition(start)
        else:
            # Restart even without rewinding, so that the readiness target comes from a
            # fetch issued after this assignment.
            self._restart(metadata_partition, state, min(state.position, start))

    def _load_view(self, partition: TopicIdPartition, view: PartitionView) -> bool:
        """Whether the snapshot's view loaded; if it does not rebuild, the partition is
        read from the start instead."""
        try:
            segments = [s.to_metadata(partition) for s in view.segments]
            self._store.load_partition(partition, segments, view.delete)
        except Exception as e:
            log_event(
                _log,
                logging.WARNING,
                "rlmm_snapshot_view_ignored",
                partition=str(partition),
                reason=repr(e),
            )
            return False
        return True

    def _restart(self, metadata_partition: int, state: _MetadataPartition, position: int) -> None:
        state.position = position
        state.generation += 1
        state.failures = 0
        state.retry_at = 0.0
        fetch = self._fetches.pop(metadata_partition, None)
        if fetch is not None:
            fetch.cancel()

    def remove_assignments(self, partitions: set[TopicIdPartition]) -> None:
        """Stop following ``partitions`` and drop their views."""
        for partition in partitions:
            user = self._users.pop(partition, None)
            self._store.drop_partition(partition)
            snapshot = self._snapshots.get(self._partitioner.metadata_partition(partition))
            if snapshot is not None:
                snapshot.partitions.pop(partition, None)
            if user is None:
                continue
            metadata_partition = user.metadata_partition
            if not any(u.metadata_partition == metadata_partition for u in self._users.values()):
                del self._metadata[metadata_partition]
                fetch = self._fetches.pop(metadata_partition, None)
                if fetch is not None:
                    fetch.cancel()
        self._notify_progress()  # writers waiting on a partition no longer read here

    # -- queries ---------------------------------------------------------------------------

    def is_ready(self, partition: TopicIdPartition) -> bool:
        user = self._users.get(partition)
        return user is not None and user.ready

    def is_assigned(self, partition: TopicIdPartition) -> bool:
        return partition in self._users

    def read_offset(self, metadata_partition: int) -> int | None:
        """The last offset processed (Kafka's readOffsetForMetadataPartition)."""
        state = self._metadata.get(metadata_partition)
        return None if state is None or state.position == 0 else state.position - 1

    async def wait_until_consumed(self, metadata_partition: int, offset: int) -> None:
        """Return once the record at ``offset`` has been processed (Kafka's
        waitTillConsumptionCatchesUp, without its own timeout: the caller bounds it);
        `RemoteStorageError` if the partition is not (or no longer) read here."""
        while True:
            state = self._metadata.get(metadata_partition)
            if state is None:
                raise RemoteStorageError(
                    f"metadata partition {metadata_partition} is not assigned to this broker"
                )
            if state.position > offset:
                return
            await self._progress.wait()

    def snapshot(self, metadata_partition: int) -> MetadataPartitionSnapshot | None:
        """The consumption of ``metadata_partition`` as a snapshot, or None while a
        user partition's view runs ahead of the reading (a rewind in progress)."""
        state = self._metadata.get(metadata_partition)
        if state is None or state.position == 0:
            return None
        consumed = state.position - 1
        views = {}
        for partition, user in self._users.items():
            if user.metadata_partition != metadata_partition:
                continue
            if user.applied_offset > consumed:
                return None
            views[partition] = self._view(partition)
        return MetadataPartitionSnapshot(metadata_partition, consumed, views)

    def _view(self, partition: TopicIdPartition) -> PartitionView:
        segments: list[RemoteLogSegmentMetadataSnapshot] = []
        if partition in self._store.partitions():
            cache = self._store.cache(partition)
            segments = [
                RemoteLogSegmentMetadataSnapshot.create(m) for m in cache.segments_in_replay_order()
            ]
        return PartitionView(segments, self._store.remote_partition_delete_metadata(partition))

    def metadata_partitions(self) -> list[int]:
        return sorted(self._metadata)

    # -- the loop --------------------------------------------------------------------------

    async def run(self) -> None:
        """Read until cancelled."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                self._start_fetches(loop.time())
                await self._wait_for_work(loop.time())
                for metadata_partition, fetch in list(self._fetches.items()):
                    if fetch.done() and self._fetches.get(metadata_partition) is fetch:
                        del self._fetches[metadata_partition]
                        self._complete(metadata_partition, fetch, loop.time())
                        await asyncio.sleep(0)  # one fetch's records at a time on the loop
        finally:
            for fetch in self._fetches.values():
                fetch.cancel()
            self._fetches.clear()

    def _start_fetches(self, now: float) -> None:
        for metadata_partition, state in self._metadata.items():
            if metadata_partition not in self._fetches and state.retry_at <= now:
                self._fetches[metadata_partition] = asyncio.create_task(
                    self._fetch(metadata_partition, state.generation, state.position),
                    name=f"rlmm-fetch-{metadata_partition}",
                )

    async def _fetch(
        self, metadata_partition: int, generation: int, position: int
    ) -> tuple[int, MetadataFetch]:
        fetched = await self._client.fetch(metadata_partition, position, self._fetch_max_wait_ms)
        return generation, fetched

    async def _wait_for_work(self, now: float) -> None:
        """Until a fetch completes, the assignment changes, or a backoff ends."""
        retries = [
            s.retry_at - now
            for p, s in self._metadata.items()
            if p not in self._fetches and s.retry_at > now
        ]
        waker = asyncio.create_task(self._wakeup.wait())
        try:
            await asyncio.wait(
                [waker, *self._fetches.values()],
                timeout=min(retries) if retries else None,
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            waker.cancel()
            self._wakeup.clear()

    def _complete(
        self, metadata_partition: int, fetch: asyncio.Task[tuple[int, MetadataFetch]], now: float
    ) -> None:
        state = self._metadata.get(metadata_partition)
        if state is None or fetch.cancelled():
            return
        error = fetch.exception()
        if error is not None:
            self._back_off(metadata_partition, state, error, now)
            return
        generation, fetched = fetch.result()
        if generation != state.generation:
            return
        state.failures = 0
        users = [u for u in self._users.values() if u.metadata_partition == metadata_partition]
        for user in users:
            if user.target is None:
                user.target = fetched.high_watermark
        for offset, value in fetched.records:
            if offset >= state.position:
                self._process(metadata_partition, offset, value)
                state.position = offset + 1
        state.position = max(state.position, fetched.next_offset)
        for user in users:
            if not user.ready and user.target is not None and state.position >= user.target:
                user.ready = True
        self._notify_progress()

    def _notify_progress(self) -> None:
        self._progress.set()
        self._progress = asyncio.Event()

    def _back_off(
        self, metadata_partition: int, state: _MetadataPartition, error: BaseException, now: float
    ) -> None:
        state.failures += 1
        delay = min(
            self._retry_backoff_max_s, self._retry_backoff_s * 2 ** min(state.failures - 1, 20)
        )
        delay *= random.uniform(0.8, 1.2)
        state.retry_at = now + delay
        log_event(
            _log,
            logging.WARNING,
            "rlmm_fetch_failed",
            metadata_partition=metadata_partition,
            offset=state.position,
            retry_in_ms=int(delay * 1000),
            reason=repr(error),
        )

    def _process(self, metadata_partition: int, offset: int, value: bytes) -> None:
        """Apply one record if it is for an assigned user partition not past it."""
        try:
            metadata = deserialize(value)
            if isinstance(metadata, RemoteLogSegmentMetadataSnapshot):
                raise ValueError("a snapshot record has no place in the topic")
            partition = (
                metadata.remote_log_segment_id.topic_id_partition
                if isinstance(metadata, RemoteLogSegmentMetadataUpdate)
                else metadata.topic_id_partition
            )
            user = self._users.get(partition)
            if (
                user is None
                or user.metadata_partition != metadata_partition
                or offset <= user.applied_offset
            ):
                return
            user.applied_offset = offset
            self._apply(metadata)
        except Exception as e:
            # Kafka's ConsumerTask would stop on a bad record; one poison record must not
            # cost every partition behind it its metadata.
            log_event(
                _log,
                logging.ERROR,
                "rlmm_record_skipped",
                metadata_partition=metadata_partition,
                offset=offset,
                reason=repr(e),
            )

    def _apply(
        self,
        metadata: RemoteLogSegmentMetadata
        | RemoteLogSegmentMetadataUpdate
        | RemotePartitionDeleteMetadata,
    ) -> None:
        """Kafka's RemotePartitionMetadataEventHandler.handleRemoteLogMetadata."""
        match metadata:
            case RemoteLogSegmentMetadata():
                self._store.handle_remote_log_segment_metadata(metadata)
            case RemoteLogSegmentMetadataUpdate():
                self._store.handle_remote_log_segment_metadata_update(metadata)
            case RemotePartitionDeleteMetadata():
                self._store.handle_remote_partition_delete_metadata(metadata)

    async def close(self) -> None:
        """Cancel fetches in flight; the run task is the owner's to cancel."""
        for fetch in self._fetches.values():
            fetch.cancel()
        for fetch in list(self._fetches.values()):
            with contextlib.suppress(BaseException):
                await fetch
        self._fetches.clear()
