"""The S3 RemoteStorageManager: the remote tier in one S3 bucket, under an optional prefix.

The layout, the order of writes and removals and the manifest are the shared ones of
`object_store_rsm`; this module only stores objects in S3 (or any S3-compatible service
at ``endpoint_url``). An object larger than one part goes up as a multipart upload,
aborted if any step fails so that no parts are left billed; reads are ranged GETs.
Credentials come from AWS's standard chain (environment, shared files, instance or
container role); nothing here reads them.

Every failure becomes a `RemoteStorageError` (retriable, as Kafka's
RemoteStorageException), `RemoteResourceNotFoundError` when the object is missing; a
missing bucket is a plain `RemoteStorageError`, not "not found", so that it never reads
as "this segment has no such index". Connect and read timeouts and a bounded number of
attempts keep a dead or stopped endpoint from hanging a caller.

Blocking; thread-safe: the one botocore client, made at construction (boto3 sessions are
not thread-safe, their clients are), is shared by every thread.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Final

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from tiercel.tiered.rsm.object_store_rsm import ObjectStoreRemoteStorageManager
from tiercel.tiered.rsm.remote_storage_manager import (
    RemoteResourceNotFoundError,
    RemoteStorageError,
)
from tiercel.tiered.rsm.s3_config import S3Config

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import CompletedPartTypeDef

__all__ = ["S3ObjectStore", "S3RemoteStorageManager"]

_NOT_FOUND: Final = frozenset({"NoSuchKey", "404", "NotFound"})
_RANGE_PAST_END: Final = "InvalidRange"  # HTTP 416: a range starting at or past the end


@contextlib.contextmanager
def _as_remote_errors(what: str) -> Iterator[None]:
    try:
        yield
    except ClientError as e:
        code = e.response.get("Error", {}).get("Code", "")
        if code in _NOT_FOUND:
            raise RemoteResourceNotFoundError(f"{what}: {e}") from e
        raise RemoteStorageError(f"{what}: {e}") from e
    except (BotoCoreError, OSError) as e:
        raise RemoteStorageError(f"{what}: {type(e).__name__}: {e}") from e


def _client(config: S3Config) -> S3Client:
    botocore_config = Config(
        connect_timeout=config.connect_timeout_s,
        read_timeout=config.read_timeout_s,
        retries={"total_max_attempts": config.max_attempts, "mode": "standard"},
        s3={"addressing_style": "path"} if config.path_style_access else None,
    )
    return boto3.session.Session().client(
        "s3",
        region_name=config.region,
        endpoint_url=config.endpoint_url,
        config=botocore_config,
    )


class S3ObjectStore:
    """An `ObjectStore` in ``config.bucket``: a key is the object's key less the prefix."""

    def __init__(self, config: S3Config) -> None:
        self.config = config
        self.bucket = config.bucket
        self.prefix = config.prefix
        self._client = _client(config)

    def put_file(self, key: str, path: str) -> None:
        with _as_remote_errors(f"uploading {path} to {self._where(key)}"):
            if os.path.getsize(path) > self.config.part_size_bytes:
                self._put_multipart(key, path)
                return
            with open(path, "rb") as file:
                self._client.put_object(Bucket=self.bucket, Key=self.prefix + key, Body=file)

    def _put_multipart(self, key: str, path: str) -> None:
        upload_id = self._client.create_multipart_upload(Bucket=self.bucket, Key=self.prefix + key)[
            "UploadId"
        ]
        try:
            parts: list[CompletedPartTypeDef] = []
            with open(path, "rb") as file:
                while chunk := file.read(self.config.part_size_bytes):
                    number = len(parts) + 1
                    answer = self._client.upload_part(
                        Bucket=self.bucket,
                        Key=self.prefix + key,
                        UploadId=upload_id,
                        PartNumber=number,
                        Body=chunk,
                    )
                    parts.append({"PartNumber": number, "ETag": answer["ETag"]})
            self._client.complete_multipart_upload(
                Bucket=self.bucket,
                Key=self.prefix + key,
                UploadId=upload_id,
                MultipartUpload={"Parts": parts},
            )
        except BaseException:
            # Uncompleted parts are stored (and billed) until aborted. If the abort fails
            # too, the bucket's lifecycle rule for incomplete uploads is the backstop.
            with contextlib.suppress(ClientError, BotoCoreError):
                self._client.abort_multipart_upload(
                    Bucket=self.bucket, Key=self.prefix + key, UploadId=upload_id
                )
            raise

    def put_bytes(self, key: str, data: bytes) -> None:
        with _as_remote_errors(f"writing {self._where(key)}"):
            self._client.put_object(Bucket=self.bucket, Key=self.prefix + key, Body=data)

    def put_all(self, files: Mapping[str, str], data: Mapping[str, bytes]) -> None:
        # Each PUT is durable when S3 answers it: nothing to batch.
        for key, path in files.items():
            self.put_file(key, path)
        for key, blob in data.items():
            self.put_bytes(key, blob)

    def get(self, key: str) -> bytes:
        with _as_remote_errors(f"reading {self._where(key)}"):
            body = self._client.get_object(Bucket=self.bucket, Key=self.prefix + key)["Body"]
            with contextlib.closing(body):
                return body.read()

    def get_range(self, key: str, start: int, end: int | None) -> bytes:
        byte_range = f"bytes={start}-{'' if end is None else end}"
        with _as_remote_errors(f"reading {byte_range} of {self._where(key)}"):
            try:
                answer = self._client.get_object(
                    Bucket=self.bucket, Key=self.prefix + key, Range=byte_range
                )
            except ClientError as e:
                if e.response.get("Error", {}).get("Code") == _RANGE_PAST_END:
                    return b""
                raise
            with contextlib.closing(answer["Body"]) as body:
                return body.read()

    def delete(self, keys: Sequence[str]) -> None:
        if not keys:
            return
        with _as_remote_errors(f"deleting {', '.join(map(self._where, keys))}"):
            # DELETE of a missing key succeeds in S3: deletion is idempotent as it is.
            if len(keys) == 1:
                self._client.delete_object(Bucket=self.bucket, Key=self.prefix + keys[0])
                return
            answer = self._client.delete_objects(
                Bucket=self.bucket,
                Delete={"Objects": [{"Key": self.prefix + key} for key in keys], "Quiet": True},
            )
            if errors := answer.get("Errors"):
                raise RemoteStorageError(f"deleting from s3://{self.bucket}: {errors}")

    def list(self, prefix: str) -> Iterator[str]:
        with _as_remote_errors(f"listing {self._where(prefix)}"):
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.prefix + prefix
            )
            for page in pages:
                for entry in page.get("Contents", []):
                    yield entry["Key"][len(self.prefix) :]

    def list_folders(self, prefix: str) -> Iterator[str]:
        with _as_remote_errors(f"listing {self._where(prefix)}"):
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.prefix + prefix, Delimiter="/"
            )
            for page in pages:
                for entry in page.get("CommonPrefixes", []):
                    yield entry["Prefix"][len(self.prefix) :]

    def close(self) -> None:
        self._client.close()

    def _where(self, key: str) -> str:
        return f"s3://{self.bucket}/{self.prefix}{key}"


class S3RemoteStorageManager(ObjectStoreRemoteStorageManager):
    """A RemoteStorageManager over an S3 bucket (``rsm.config.s3.*``). Thread-safe."""

    def __init__(self, config: S3Config) -> None:
        super().__init__(S3ObjectStore(config))
