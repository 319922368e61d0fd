"""S3RemoteStorageManager against a real S3 endpoint (moto's server, a separate process):
the RemoteStorageManager contract (support.rsm_contract), with and without a key prefix,
multipart uploads, and failures: a missing bucket, a dead endpoint, a stopped server."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from support.moto_server import REGION, MotoServer, S3Bucket, create_bucket
from support.ports import free_port
from support.rsm_contract import RemoteStorageManagerContract, metadata, segment_files
from tiercel.tiered.rsm.object_layout import LOG_SUFFIX, MANIFEST_SUFFIX, object_key
from tiercel.tiered.rsm.remote_storage_manager import (
    IndexType,
    RemoteResourceNotFoundError,
    RemoteStorageError,
)
from tiercel.tiered.rsm.s3_remote_storage import MIB, S3Config, S3RemoteStorageManager


def s3_rsm(endpoint_url: str, bucket: str, **settings: object) -> S3RemoteStorageManager:
    return S3RemoteStorageManager(
        S3Config(bucket, endpoint_url=endpoint_url, region=REGION, **settings)  # type: ignore[arg-type]
    )


@pytest.fixture(params=["", "tiercel/cluster-1"], ids=["no-prefix", "prefix"])
def rsm(s3_bucket: S3Bucket, request: pytest.FixtureRequest) -> Iterator[S3RemoteStorageManager]:
    manager = s3_rsm(s3_bucket.endpoint_url, s3_bucket.name, prefix=request.param)
    yield manager
    manager.close()


class TestS3RemoteStorageManagerContract(RemoteStorageManagerContract):
    pass


def bucket_keys(bucket: S3Bucket) -> set[str]:
    client = bucket.client()
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket.name)
    return {entry["Key"] for page in pages for entry in page.get("Contents", [])}


def test_objects_are_under_the_prefix(s3_bucket: S3Bucket, tmp_path: Path) -> None:
    rsm = s3_rsm(s3_bucket.endpoint_url, s3_bucket.name, prefix="/tiercel/cluster-1/")
    m = metadata()
    rsm.copy_log_segment_data(m, segment_files(tmp_path / "segment"))
    assert rsm.store.prefix == "tiercel/cluster-1/"
    assert bucket_keys(s3_bucket) == {f"tiercel/cluster-1/{key}" for key in rsm.store.list("")}
    assert f"tiercel/cluster-1/{object_key(m, MANIFEST_SUFFIX)}" in bucket_keys(s3_bucket)
    # Another prefix in the same bucket is another tier.
    other = s3_rsm(s3_bucket.endpoint_url, s3_bucket.name, prefix="tiercel/cluster-2")
    assert list(other.store.list("")) == []
    with pytest.raises(RemoteResourceNotFoundError):
        other.fetch_index(m, IndexType.OFFSET)


def test_a_large_segment_goes_up_in_parts(s3_bucket: S3Bucket, tmp_path: Path) -> None:
    part = 5 * MIB  # S3's smallest part; the default is 8 MiB
    log = bytes(range(256)) * (2 * part // 256) + b"tail" * 1000  # three parts, the last small
    rsm = s3_rsm(s3_bucket.endpoint_url, s3_bucket.name, part_size_bytes=part)
    m = metadata()
    rsm.copy_log_segment_data(m, segment_files(tmp_path / "segment", log=log))
    head = s3_bucket.client().head_object(Bucket=s3_bucket.name, Key=object_key(m, LOG_SUFFIX))
    assert head["ETag"].strip('"').endswith("-3")  # a multipart upload's ETag counts parts
    assert head["ContentLength"] == len(log)
    # Ranges across part boundaries.
    assert rsm.fetch_log_segment(m, part - 10, part + 9) == log[part - 10 : part + 10]
    assert rsm.fetch_log_segment(m, 2 * part - 1, None) == log[2 * part - 1 :]
    assert rsm.fetch_log_segment(m, 0, None) == log
    # Small objects of the same segment went up whole.
    index = s3_bucket.client().head_object(Bucket=s3_bucket.name, Key=object_key(m, "index"))
    assert "-" not in index["ETag"]


def test_a_failed_multipart_upload_is_aborted(s3_bucket: S3Bucket, tmp_path: Path) -> None:
    # Parts below S3's 5 MiB minimum: the upload's completion is refused (EntityTooSmall).
    rsm = s3_rsm(s3_bucket.endpoint_url, s3_bucket.name, part_size_bytes=MIB)
    m = metadata()
    data = segment_files(tmp_path / "segment", log=b"x" * (3 * MIB))
    with pytest.raises(RemoteStorageError, match="EntityTooSmall"):
        rsm.copy_log_segment_data(m, data)
    client = s3_bucket.client()
    assert client.list_multipart_uploads(Bucket=s3_bucket.name).get("Uploads", []) == []
    assert object_key(m, MANIFEST_SUFFIX) not in bucket_keys(s3_bucket)


def test_a_missing_bucket_is_an_error_not_a_missing_object(
    moto_s3_endpoint: str, aws_test_credentials: None, tmp_path: Path
) -> None:
    rsm = s3_rsm(moto_s3_endpoint, "no-such-bucket-here", max_attempts=1)
    m = metadata()
    for call in [
        lambda: rsm.copy_log_segment_data(m, segment_files(tmp_path / "segment")),
        lambda: rsm.fetch_index(m, IndexType.TRANSACTION),
        lambda: rsm.fetch_log_segment(m, 0, None),
        lambda: list(rsm.store.list("")),
    ]:
        with pytest.raises(RemoteStorageError, match="NoSuchBucket") as raised:
            call()
        assert not isinstance(raised.value, RemoteResourceNotFoundError)


def within(seconds: float, call: Callable[[], object]) -> RemoteStorageError:
    """The RemoteStorageError ``call`` raises, asserting it came within ``seconds``."""
    began = time.monotonic()
    with pytest.raises(RemoteStorageError) as raised:
        call()
    assert time.monotonic() - began < seconds
    return raised.value


def test_an_unreachable_endpoint_is_an_error(aws_test_credentials: None, tmp_path: Path) -> None:
    nothing_listens = f"http://127.0.0.1:{free_port()}"
    rsm = s3_rsm(nothing_listens, "bucket", connect_timeout_s=1, max_attempts=2)
    data = segment_files(tmp_path / "segment")
    within(10, lambda: rsm.copy_log_segment_data(metadata(), data))
    within(10, lambda: rsm.fetch_index(metadata(), IndexType.OFFSET))


def test_a_stopped_server_is_an_error_within_the_timeout(
    moto_server_factory: Callable[[], MotoServer], tmp_path: Path
) -> None:
    server = moto_server_factory()
    bucket = create_bucket(server.endpoint_url)
    rsm = s3_rsm(bucket.endpoint_url, bucket.name, read_timeout_s=1, max_attempts=2)
    m = metadata()
    rsm.copy_log_segment_data(m, segment_files(tmp_path / "segment"))
    server.pause()  # SIGSTOP: the kernel still accepts connections; nothing answers
    try:
        error = within(10, lambda: rsm.fetch_log_segment(m, 0, 9))
        assert "timeout" in str(error).lower()
        within(10, lambda: rsm.copy_log_segment_data(metadata(), segment_files(tmp_path / "b")))
    finally:
        server.resume()
    assert rsm.fetch_log_segment(m, 0, 9) == bytes(range(10))  # the same client recovers


def test_a_killed_server_is_an_error(
    moto_server_factory: Callable[[], MotoServer], tmp_path: Path
) -> None:
    server = moto_server_factory()
    bucket = create_bucket(server.endpoint_url)
    rsm = s3_rsm(bucket.endpoint_url, bucket.name, connect_timeout_s=1, max_attempts=2)
    m = metadata()
    rsm.copy_log_segment_data(m, segment_files(tmp_path / "segment"))
    server.kill()
    within(10, lambda: rsm.fetch_index(m, IndexType.OFFSET))
    within(10, lambda: rsm.delete_log_segment_data(m))
