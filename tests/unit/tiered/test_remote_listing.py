"""A partition's remote segments listed from a local tier directory alone: complete
uploads with their manifests, incomplete ones with the objects found, every topic id
under a name, and neither other partitions nor topics whose names extend this one's."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

import pytest

from support.rsm_contract import metadata, segment_files
from tiercel.storage.checkpoint_file import uuid_to_kafka_str
from tiercel.storage.topic_partition import TopicPartition
from tiercel.tiered.rsm.local_tiered_storage import LocalTieredStorage
from tiercel.tiered.rsm.object_layout import MANIFEST_SUFFIX, object_key
from tiercel.tiered.rsm.remote_listing import list_remote_segments, topic_ids
from tiercel.tiered.rsm.remote_storage_manager import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
)

COPY_SEGMENT_STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED
COPY_SEGMENT_FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


def finished(m: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadata:
    """``m`` as its manifest reads back: a manifest marks a finished copy."""
    return dataclasses.replace(m, state=COPY_SEGMENT_FINISHED)


ORDERS_3 = TopicPartition("orders", 3)


def on(topic_id: uuid.UUID, m: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadata:
    """``m`` as an upload of the topic with id ``topic_id``."""
    segment_id = RemoteLogSegmentId(
        topic_id, m.remote_log_segment_id.topic_partition, m.remote_log_segment_id.id
    )
    return RemoteLogSegmentMetadata(
        segment_id,
        m.start_offset,
        m.end_offset,
        m.max_timestamp_ms,
        m.broker_id,
        m.event_timestamp_ms,
        m.segment_size_in_bytes,
        m.segment_leader_epochs,
    )


@pytest.fixture
def rsm(tmp_path: Path) -> LocalTieredStorage:
    return LocalTieredStorage(str(tmp_path / "remote"))


def test_complete_and_incomplete_uploads(rsm: LocalTieredStorage, tmp_path: Path) -> None:
    first, second, cut_short = metadata(0), metadata(100), metadata(200)
    rsm.copy_log_segment_data(second, segment_files(tmp_path / "b", transactions=True))
    rsm.copy_log_segment_data(first, segment_files(tmp_path / "a"))
    data = segment_files(tmp_path / "c")
    # A copy cut short by a crash once the log and offset index were in place.
    rsm.store.put_all(
        {
            object_key(cut_short, "log"): data.log_segment,
            object_key(cut_short, "index"): data.offset_index,
        },
        {},
    )
    listed = list_remote_segments(rsm.store, ORDERS_3)
    assert [s.start_offset for s in listed] == [0, 100, 200]
    assert [s.state for s in listed] == [COPY_SEGMENT_FINISHED] * 2 + [COPY_SEGMENT_STARTED]
    assert [s.manifest.metadata if s.manifest else None for s in listed] == [
        finished(first),
        finished(second),
        None,
    ]
    assert listed[1].suffixes == {
        "log",
        "index",
        "timeindex",
        "txnindex",
        "snapshot",
        "leader-epoch-checkpoint",
        MANIFEST_SUFFIX,
    }
    assert listed[2].suffixes == {"log", "index"}
    assert listed[2].segment_id == uuid_to_kafka_str(cut_short.remote_log_segment_id.id)


def test_every_topic_id_under_the_name_unless_one_is_given(
    rsm: LocalTieredStorage, tmp_path: Path
) -> None:
    old_id, new_id = uuid.uuid4(), uuid.uuid4()  # the topic was deleted and recreated
    old, new = on(old_id, metadata(0)), on(new_id, metadata(0))
    rsm.copy_log_segment_data(old, segment_files(tmp_path / "a"))
    rsm.copy_log_segment_data(new, segment_files(tmp_path / "b"))
    old_str, new_str = uuid_to_kafka_str(old_id), uuid_to_kafka_str(new_id)
    assert topic_ids(rsm.store, "orders") == sorted([old_str, new_str])
    assert {s.topic_id for s in list_remote_segments(rsm.store, ORDERS_3)} == {old_str, new_str}
    only_new = list_remote_segments(rsm.store, ORDERS_3, new_str)
    assert [s.manifest.metadata if s.manifest else None for s in only_new] == [finished(new)]


def test_other_partitions_and_topics_are_not_listed(
    rsm: LocalTieredStorage, tmp_path: Path
) -> None:
    rsm.copy_log_segment_data(metadata(0, topic="orders-eu"), segment_files(tmp_path / "a"))
    rsm.copy_log_segment_data(metadata(0, topic="orders"), segment_files(tmp_path / "b"))
    other_partition = object_key(metadata(0), "log").replace("/3/", "/4/")
    Path(rsm.root, other_partition).parent.mkdir(parents=True)
    Path(rsm.root, other_partition).write_bytes(b"x")
    Path(rsm.root, "orders-not-a-layout-key").mkdir()
    listed = list_remote_segments(rsm.store, ORDERS_3)
    assert [s.topic_partition for s in listed] == [ORDERS_3]
    assert list_remote_segments(rsm.store, TopicPartition("orders", 4))[0].suffixes == {"log"}
    assert list_remote_segments(rsm.store, TopicPartition("nothing", 0)) == []


def test_an_unreadable_manifest_is_reported_not_raised(
    rsm: LocalTieredStorage, tmp_path: Path
) -> None:
    m = metadata(0)
    rsm.copy_log_segment_data(m, segment_files(tmp_path / "a"))
    Path(rsm.root, object_key(m, MANIFEST_SUFFIX)).write_bytes(b"{not json")
    [listed] = list_remote_segments(rsm.store, ORDERS_3)
    assert listed.state == COPY_SEGMENT_STARTED
    assert listed.manifest_error is not None and "not a segment manifest" in listed.manifest_error
