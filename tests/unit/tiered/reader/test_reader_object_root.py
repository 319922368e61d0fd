"""Opening the tier from a root URL: what is accepted, and clear errors for the rest."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiercel.tiered.reader import open_object_root
from tiercel.tiered.rsm.local_tiered_storage import LocalDirectoryStore
from tiercel.tiered.rsm.s3_remote_storage import S3ObjectStore


def test_a_directory_and_a_bucket_with_a_prefix(tmp_path: Path) -> None:
    local = open_object_root(f"file://{tmp_path}")
    assert isinstance(local, LocalDirectoryStore) and local.root == str(tmp_path)
    s3 = open_object_root("s3://tier/prod/eu", endpoint_url="http://127.0.0.1:1", region="x")
    assert isinstance(s3, S3ObjectStore)
    assert (s3.bucket, s3.prefix, s3.config.endpoint_url) == (
        "tier",
        "prod/eu/",
        "http://127.0.0.1:1",
    )
    s3.close()


@pytest.mark.parametrize(
    ("root", "error"),
    [
        ("/var/tier", "file:// or s3://"),
        ("hdfs://nn/tier", "file:// or s3://"),
        ("file://var/tier", "absolute path"),
        ("file:///no/such/tier", "no such directory"),
        ("s3:///prefix", "needs a bucket"),
    ],
)
def test_bad_roots_are_clear_errors(root: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        open_object_root(root)
