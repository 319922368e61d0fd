"""OffsetStore: the committed offsets of every group this coordinator owns.

Kept apart from group membership (as Kafka 4's OffsetMetadataManager does) so that any
group type stores offsets the same way. The cache only ever holds what is durable in
__consumer_offsets: a commit enters it once its record is written, and a commit whose
record lies earlier in the log than the cached one never replaces it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from tiercel.server.coordinator.group.group_metadata import OffsetExpiration
from tiercel.server.coordinator.group.offset_and_metadata import OffsetAndMetadata
from tiercel.storage.topic_partition import TopicPartition


class OffsetStore:
    """Invariants: no group maps to an empty dict; ``_pending[group][tp]`` counts the
    commits of that partition whose records are being written (never zero).

    Event-loop only.
    """

    def __init__(self) -> None:
        self._offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
        self._pending: dict[str, dict[TopicPartition, int]] = {}

    def get(self, group_id: str, tp: TopicPartition) -> OffsetAndMetadata | None:
        offsets = self._offsets.get(group_id)
        return None if offsets is None else offsets.get(tp)

    def all(self, group_id: str) -> Mapping[TopicPartition, OffsetAndMetadata]:
        return self._offsets.get(group_id, {})

    def has_offsets(self, group_id: str) -> bool:
        """Committed or being committed, as Kafka's GroupMetadata.hasOffsets."""
        return group_id in self._offsets or group_id in self._pending

    def count(self) -> int:
        return sum(len(offsets) for offsets in self._offsets.values())

    def put(self, group_id: str, tp: TopicPartition, offset: OffsetAndMetadata) -> None:
        """Cache a written commit unless a later record of the partition is cached."""
        offsets = self._offsets.setdefault(group_id, {})
        current = offsets.get(tp)
        if current is None or current.record_offset < offset.record_offset:
            offsets[tp] = offset

    def load(self, group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        """Install what a partition load found (it is the log's latest state)."""
        if offsets:
            self._offsets[group_id] = dict(offsets)

    def begin_commit(self, group_id: str, tps: Iterable[TopicPartition]) -> None:
        pending = self._pending.setdefault(group_id, {})
        for tp in tps:
            pending[tp] = pending.get(tp, 0) + 1

    def end_commit(
        self,
        group_id: str,
        tps: Iterable[TopicPartition],
        written: Mapping[TopicPartition, OffsetAndMetadata] | None,
    ) -> None:
        """Finish commits begun with `begin_commit`; ``written`` (None when the write
        failed) is cached for partitions whose offset was not removed meanwhile."""
        pending = self._pending.get(group_id)
        if pending is None:
            return  # the group was unloaded or deleted meanwhile
        for tp in tps:
            left = pending.get(tp, 0)
            if not left:
                continue  # its offset was deleted while the commit was being written
            if written is not None:
                self.put(group_id, tp, written[tp])
            if left > 1:
                pending[tp] = left - 1
            else:
                del pending[tp]
        if not pending:
            del self._pending[group_id]

    def remove(self, group_id: str, tps: Iterable[TopicPartition]) -> list[TopicPartition]:
        """Drop these partitions' offsets (and forget their pending commits, whose
        results will then not be cached); the ones that had an offset."""
        offsets = self._offsets.get(group_id, {})
        pending = self._pending.get(group_id, {})
        removed = []
        for tp in tps:
            pending.pop(tp, None)
            if offsets.pop(tp, None) is not None:
                removed.append(tp)
        if not offsets:
            self._offsets.pop(group_id, None)
        if not pending:
            self._pending.pop(group_id, None)
        return removed

    def remove_group(self, group_id: str) -> list[TopicPartition]:
        removed = list(self._offsets.pop(group_id, {}))
        self._pending.pop(group_id, None)
        return removed

    def expired(
        self, group_id: str, now_ms: int, retention_ms: int, expiration: OffsetExpiration
    ) -> list[TopicPartition]:
        """Partitions whose offset has expired: an explicit expire timestamp (OffsetCommit
        v2-v4) has passed, or else ``retention_ms`` has passed since the group's base
        time; never a partition with a commit in flight or of an excluded topic."""
        pending = self._pending.get(group_id, {})
        expired = []
        for tp, offset in self._offsets.get(group_id, {}).items():
            if tp in pending or tp.topic in expiration.excluded_topics:
                continue
            if offset.expire_timestamp_ms is not None:
                if now_ms >= offset.expire_timestamp_ms:
                    expired.append(tp)
            elif now_ms - expiration.base(offset) >= retention_ms:
                expired.append(tp)
        return expired
