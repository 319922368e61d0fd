"""RemoteLogMetadataCache: segment states, epoch lookups and Kafka's transitions."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from tiercel.storage.topic_partition import TopicIdPartition, TopicPartition
from tiercel.tiered.rlmm.remote_log_metadata_cache import RemoteLogMetadataCache
from tiercel.tiered.rlmm.remote_log_metadata_manager import (
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
)
from tiercel.tiered.rlmm.remote_partition_metadata_store import RemotePartitionMetadataStore
from tiercel.tiered.rsm.remote_storage_manager import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemoteResourceNotFoundError,
)

TIP = TopicIdPartition(uuid.uuid4(), TopicPartition("t", 0))
S = RemoteLogSegmentState


def segment(start: int, end: int, epochs: dict[int, int]) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(TIP.topic_id, TIP.topic_partition, uuid.uuid4()),
        start,
        end,
        max_timestamp_ms=0,
        broker_id=1,
        event_timestamp_ms=0,
        segment_size_in_bytes=(end - start + 1) * 10,
        segment_leader_epochs=epochs,
    )


def update(
    m: RemoteLogSegmentMetadata, state: RemoteLogSegmentState
) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(m.remote_log_segment_id, 1, state, broker_id=2)


def finished(cache: RemoteLogMetadataCache, m: RemoteLogSegmentMetadata) -> None:
    cache.add_copy_in_progress_segment(m)
    cache.update_remote_log_segment_metadata(update(m, S.COPY_SEGMENT_FINISHED))


def test_only_finished_segments_are_served() -> None:
    cache = RemoteLogMetadataCache()
    m = segment(0, 99, {0: 0})
    cache.add_copy_in_progress_segment(m)
    assert cache.remote_log_segment_metadata(0, 50) is None
    assert cache.highest_offset_for_epoch(0) is None
    assert [x.state for x in cache.list_remote_log_segments()] == [S.COPY_SEGMENT_STARTED]
    cache.update_remote_log_segment_metadata(update(m, S.COPY_SEGMENT_FINISHED))
    found = cache.remote_log_segment_metadata(0, 50)
    assert found is not None and found.state == S.COPY_SEGMENT_FINISHED and found.broker_id == 2
    assert cache.highest_offset_for_epoch(0) == 99
    assert cache.remote_log_size(0) == 1000


def test_a_segment_spanning_epochs_answers_each_within_its_range() -> None:
    # Epoch 1 holds 0..39, epoch 2 40..99; epoch 3 starts in the next segment.
    cache = RemoteLogMetadataCache()
    first, second = segment(0, 99, {1: 0, 2: 40}), segment(100, 149, {2: 100, 3: 120})
    finished(cache, first)
    finished(cache, second)
    assert cache.remote_log_segment_metadata(1, 39) == cache.remote_log_segment_metadata(2, 40)
    assert cache.remote_log_segment_metadata(1, 40) is None  # epoch 1 ended at 39
    assert cache.remote_log_segment_metadata(2, 119) is not None
    assert cache.remote_log_segment_metadata(2, 120) is None
    assert cache.remote_log_segment_metadata(3, 149) is not None
    assert cache.remote_log_segment_metadata(3, 150) is None
    assert [cache.highest_offset_for_epoch(e) for e in (1, 2, 3, 4)] == [39, 119, 149, None]
    assert [m.start_offset for m in cache.list_remote_log_segments(2)] == [0, 100]


def test_deletion_unindexes_then_forgets() -> None:
    cache = RemoteLogMetadataCache()
    m = segment(0, 9, {0: 0})
    finished(cache, m)
    cache.update_remote_log_segment_metadata(update(m, S.DELETE_SEGMENT_STARTED))
    assert cache.remote_log_segment_metadata(0, 5) is None
    assert [x.state for x in cache.list_remote_log_segments(0)] == [S.DELETE_SEGMENT_STARTED]
    cache.update_remote_log_segment_metadata(update(m, S.DELETE_SEGMENT_FINISHED))
    assert cache.list_remote_log_segments() == [] and len(cache) == 0
    with pytest.raises(RemoteResourceNotFoundError):
        cache.update_remote_log_segment_metadata(update(m, S.DELETE_SEGMENT_FINISHED))


@pytest.mark.parametrize(
    ("path", "bad"),
    [
        ([S.COPY_SEGMENT_FINISHED], S.COPY_SEGMENT_FINISHED),  # self transition: valid
        ([S.DELETE_SEGMENT_STARTED], S.COPY_SEGMENT_FINISHED),
        ([S.COPY_SEGMENT_FINISHED], S.DELETE_SEGMENT_FINISHED),
    ],
)
def test_transitions_are_kafkas(
    path: list[RemoteLogSegmentState], bad: RemoteLogSegmentState
) -> None:
    cache = RemoteLogMetadataCache()
    m = segment(0, 9, {0: 0})
    cache.add_copy_in_progress_segment(m)
    for state in path:
        cache.update_remote_log_segment_metadata(update(m, state))
    if path[-1] == bad:
        cache.update_remote_log_segment_metadata(update(m, bad))
        return
    with pytest.raises(ValueError, match="cannot go from"):
        cache.update_remote_log_segment_metadata(update(m, bad))


def test_a_reupload_at_the_same_offset_replaces_the_older_segment() -> None:
    cache = RemoteLogMetadataCache()
    old, new = segment(0, 9, {0: 0}), segment(0, 9, {0: 0})
    finished(cache, old)
    finished(cache, new)
    served = cache.remote_log_segment_metadata(0, 3)
    assert served is not None and served.remote_log_segment_id == new.remote_log_segment_id
    assert len(cache.list_remote_log_segments(0)) == 2  # the older one awaits deletion


def test_diverged_reuploads_each_serve_the_offsets_of_the_epoch_they_reach() -> None:
    """KIP-405 scenario 5: A's seg-0-3 (LE-0 to 3) and B's re-upload seg-0-3 (LE-0 at 0,
    LE-1 at 2) both start epoch 0 at 0. Offsets 2 and 3 of epoch 0 are only in A's; once
    B's (off A's lineage) is deleted, A's serves offsets 0 and 1 too."""
    cache = RemoteLogMetadataCache()
    lineage_a, diverged = segment(0, 3, {0: 0}), segment(0, 3, {0: 0, 1: 2})
    finished(cache, lineage_a)
    finished(cache, diverged)

    def served(epoch: int, offset: int) -> RemoteLogSegmentId | None:
        found = cache.remote_log_segment_metadata(epoch, offset)
        return None if found is None else found.remote_log_segment_id

    assert served(0, 1) == diverged.remote_log_segment_id  # the newer first
    assert served(0, 2) == served(0, 3) == lineage_a.remote_log_segment_id
    assert served(1, 2) == diverged.remote_log_segment_id
    for state in (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED):
        cache.update_remote_log_segment_metadata(update(diverged, state))
    assert [served(0, o) for o in range(4)] == [lineage_a.remote_log_segment_id] * 4
    assert served(1, 2) is None
    assert cache.remote_log_size(0) == lineage_a.segment_size_in_bytes


def test_an_update_cannot_start_a_copy() -> None:
    with pytest.raises(ValueError):
        update(segment(0, 9, {0: 0}), S.COPY_SEGMENT_STARTED)


def test_the_store_empties_a_partitions_view_once_its_deletion_finishes() -> None:
    """Kafka drops the view; here it stays, empty, for a partition tiered again under
    the same topic id (see `handle_remote_partition_delete_metadata`)."""
    store = RemotePartitionMetadataStore()
    with pytest.raises(RemoteResourceNotFoundError):
        store.cache(TIP)
    store.handle_remote_log_segment_metadata(segment(0, 9, {0: 0}))
    assert len(store.cache(TIP)) == 1
    P = RemotePartitionDeleteState
    for state in (P.DELETE_PARTITION_MARKED, P.DELETE_PARTITION_STARTED):
        store.handle_remote_partition_delete_metadata(
            RemotePartitionDeleteMetadata(TIP, state, 0, 1)
        )
        assert store.partition_delete_state(TIP) == state
    with pytest.raises(ValueError):
        store.handle_remote_partition_delete_metadata(
            RemotePartitionDeleteMetadata(TIP, P.DELETE_PARTITION_MARKED, 0, 1)
        )
    store.handle_remote_partition_delete_metadata(
        RemotePartitionDeleteMetadata(TIP, P.DELETE_PARTITION_FINISHED, 0, 1)
    )
    assert len(store.cache(TIP)) == 0 and store.partition_delete_state(TIP) is None
    store.handle_remote_log_segment_metadata(segment(10, 19, {0: 10}))
    assert len(store.cache(TIP)) == 1
    store.drop_partition(TIP)  # no longer followed here
    assert store.partitions() == []


def test_next_segment_with_txn_index_passes_over_segments_known_empty() -> None:
    """KIP-1058's nextSegmentWithTxnIndex: the segment holding the offset if it has a
    transaction index, else the first later one of the epoch that has; segments without
    one, unfinished or being deleted are passed over; metadata from before KIP-1058
    (txn_idx_empty false) counts as having one."""
    cache = RemoteLogMetadataCache()
    plain = [replace(segment(s, s + 9, {0: s}), txn_idx_empty=True) for s in range(0, 100, 10)]
    for m in plain:
        finished(cache, m)
    assert cache.next_segment_with_txn_index(0, 0) is None
    with_aborts = segment(100, 109, {0: 100, 1: 105})
    finished(cache, with_aborts)
    assert cache.next_segment_with_txn_index(0, 3) == cache.segment_metadata(
        with_aborts.remote_log_segment_id
    )
    assert cache.next_segment_with_txn_index(0, 104) is not None  # the one holding it
    assert cache.next_segment_with_txn_index(0, 110) is None
    assert cache.next_segment_with_txn_index(1, 105) is not None  # its other epoch
    assert cache.next_segment_with_txn_index(2, 0) is None  # no such epoch
    later = segment(120, 129, {1: 120})
    cache.add_copy_in_progress_segment(later)  # unfinished: not served
    assert cache.next_segment_with_txn_index(1, 110) is None
    cache.update_remote_log_segment_metadata(update(later, S.COPY_SEGMENT_FINISHED))
    assert cache.next_segment_with_txn_index(1, 110) == cache.segment_metadata(
        later.remote_log_segment_id
    )
    # Being deleted: passed over.
    cache.update_remote_log_segment_metadata(update(with_aborts, S.DELETE_SEGMENT_STARTED))
    assert cache.next_segment_with_txn_index(0, 3) is None
    assert cache.next_segment_with_txn_index(1, 105) == cache.segment_metadata(
        later.remote_log_segment_id
    )
