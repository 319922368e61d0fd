"""S3RemoteStorageManager's settings and error mapping, without a network: what a bad
setting raises, how a prefix is normalised, which S3 answers mean "not found"."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError

from tiercel.tiered.rsm.remote_storage_manager import (
    RemoteResourceNotFoundError,
    RemoteStorageError,
)
from tiercel.tiered.rsm.s3_config import DEFAULT_PART_SIZE_BYTES, MIB, S3Config
from tiercel.tiered.rsm.s3_remote_storage import _as_remote_errors


@pytest.mark.parametrize(
    ("prefix", "normalised"),
    [("", ""), ("/", ""), ("a", "a/"), ("a/b/", "a/b/"), ("/a/b", "a/b/")],
)
def test_a_prefix_is_a_folder(prefix: str, normalised: str) -> None:
    assert S3Config("b", prefix=prefix).prefix == normalised


def test_defaults() -> None:
    config = S3Config("b")
    assert (config.part_size_bytes, config.region, config.endpoint_url) == (8 * MIB, None, None)
    assert DEFAULT_PART_SIZE_BYTES == 8 * MIB


@pytest.mark.parametrize(
    "settings",
    [
        {"bucket": ""},
        {"part_size_bytes": 0},
        {"connect_timeout_s": 0},
        {"read_timeout_s": -1},
        {"max_attempts": 0},
    ],
)
def test_bad_settings_are_refused(settings: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        S3Config(**{"bucket": "b", **settings})  # type: ignore[arg-type]


def client_error(code: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "m"}}, "GetObject")


@pytest.mark.parametrize("code", ["NoSuchKey", "404", "NotFound"])
def test_a_missing_object_is_not_found(code: str) -> None:
    with pytest.raises(RemoteResourceNotFoundError), _as_remote_errors("reading"):
        raise client_error(code)


@pytest.mark.parametrize(
    "error",
    [
        client_error("NoSuchBucket"),
        client_error("AccessDenied"),
        client_error("SlowDown"),
        EndpointConnectionError(endpoint_url="http://127.0.0.1:1"),
        ReadTimeoutError(endpoint_url="http://127.0.0.1:1"),
        FileNotFoundError("the segment went away"),
    ],
)
def test_every_other_failure_is_a_plain_remote_storage_error(error: Exception) -> None:
    with pytest.raises(RemoteStorageError) as raised, _as_remote_errors("reading"):
        raise error
    assert not isinstance(raised.value, RemoteResourceNotFoundError)
