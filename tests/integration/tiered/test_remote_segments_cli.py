"""``tiercel remote-segments`` run as an operator runs it, against an S3 bucket (moto's
server) that an S3RemoteStorageManager filled: complete and incomplete uploads, two
topic ids under one name, a key prefix, and an unreachable endpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from support.moto_server import REGION, S3Bucket
from support.ports import free_port
from support.rsm_contract import metadata, segment_files
from tiercel.storage.checkpoint_file import uuid_to_kafka_str
from tiercel.tiered.rsm.object_layout import MANIFEST_SUFFIX, object_key
from tiercel.tiered.rsm.remote_storage_manager import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
)
from tiercel.tiered.rsm.s3_remote_storage import S3Config, S3RemoteStorageManager

TIERCEL = Path(sys.executable).with_name("tiercel")


def remote_segments(*args: str) -> subprocess.CompletedProcess[str]:
    # The fixtures' fake credentials are in os.environ: the standard chain finds them.
    return subprocess.run(
        [str(TIERCEL), "remote-segments", "--topic", "orders", "--partition", "3", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ),
    )


def as_upload_of(topic_id: uuid.UUID, start: int) -> RemoteLogSegmentMetadata:
    m = metadata(start)
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(topic_id, m.remote_log_segment_id.topic_partition, uuid.uuid4()),
        m.start_offset,
        m.end_offset,
        m.max_timestamp_ms,
        m.broker_id,
        m.event_timestamp_ms,
        m.segment_size_in_bytes,
        {2: start, 4: start + 50},
    )


def test_listing_a_bucket(s3_bucket: S3Bucket, tmp_path: Path) -> None:
    rsm = S3RemoteStorageManager(S3Config(s3_bucket.name, "tier/", REGION, s3_bucket.endpoint_url))
    old_id, new_id = uuid.uuid4(), uuid.uuid4()  # the topic was deleted and recreated
    old, complete, incomplete = (
        as_upload_of(old_id, 0),
        as_upload_of(new_id, 0),
        as_upload_of(new_id, 100),
    )
    for m in (old, complete, incomplete):
        rsm.copy_log_segment_data(m, segment_files(tmp_path / str(m.remote_log_segment_id.id)))
    # A crash between the last object and the manifest.
    rsm.store.delete([object_key(incomplete, MANIFEST_SUFFIX)])

    store = ["--s3-bucket", s3_bucket.name, "--s3-prefix", "tier"]
    store += ["--s3-endpoint-url", s3_bucket.endpoint_url, "--s3-region", REGION]
    listed = remote_segments(*store, "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    by_segment = {row["segment_id"]: row for row in rows}
    assert len(rows) == 3
    ids = {
        name: uuid_to_kafka_str(m.remote_log_segment_id.id)
        for name, m in [("old", old), ("complete", complete), ("incomplete", incomplete)]
    }
    assert by_segment[ids["old"]]["topic_id"] == uuid_to_kafka_str(old_id)
    assert by_segment[ids["complete"]]["state"] == "COPY_SEGMENT_FINISHED"
    assert by_segment[ids["complete"]]["segment_leader_epochs"] == [[2, 0], [4, 50]]
    assert by_segment[ids["complete"]]["end_offset"] == 99
    assert by_segment[ids["incomplete"]]["state"] == "COPY_SEGMENT_STARTED"
    assert by_segment[ids["incomplete"]]["objects"] == sorted(
        ["log", "index", "timeindex", "snapshot", "leader-epoch-checkpoint"]
    )

    one_id = remote_segments(*store, f"--topic-id={uuid_to_kafka_str(new_id)}")
    assert one_id.returncode == 0, one_id.stderr
    lines = one_id.stdout.splitlines()
    assert len(lines) == 2
    assert f"segment={ids['complete']} state=COPY_SEGMENT_FINISHED" in lines[0]
    assert " epochs=2:0,4:50 " in lines[0]
    assert lines[1].endswith(
        "state=COPY_SEGMENT_STARTED objects=index,leader-epoch-checkpoint,log,snapshot,timeindex"
    )
    # Without the prefix, the same bucket holds nothing of the layout.
    no_prefix = remote_segments(*store[:2], *store[4:])
    assert (no_prefix.returncode, no_prefix.stdout) == (0, "")


@pytest.mark.usefixtures("aws_test_credentials")
def test_an_unreachable_endpoint_is_an_error_not_a_traceback() -> None:
    nothing_listens = f"http://127.0.0.1:{free_port()}"
    listed = remote_segments("--s3-bucket", "b", "--s3-endpoint-url", nothing_listens)
    assert listed.returncode == 1
    assert listed.stderr.startswith("tiercel remote-segments: ")
    assert "Traceback" not in listed.stderr
