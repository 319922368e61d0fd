"""The object store a reader with no broker opens from a root URL: ``file:///dir`` (the
local RSM's ``rsm.config.dir``) or ``s3://bucket/prefix`` (``rsm.config.s3.bucket`` and
``rsm.config.s3.prefix``), with the S3 endpoint and region as options. Credentials come
from AWS's standard chain. Blocking; any thread.
"""

from __future__ import annotations

import os
from urllib.parse import unquote, urlsplit

from tiercel.tiered.rsm.local_tiered_storage import LocalDirectoryStore
from tiercel.tiered.rsm.object_store import ObjectStore
from tiercel.tiered.rsm.s3_config import S3Config
from tiercel.tiered.rsm.s3_remote_storage import S3ObjectStore

__all__ = ["open_object_root"]


def open_object_root(
    root: str, endpoint_url: str | None = None, region: str | None = None
) -> ObjectStore:
    """The store at ``root``; ValueError for a URL of another scheme, or a missing
    directory (a typo must not read as an empty tier)."""
    parts = urlsplit(root)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise ValueError(f"{root}: a file:// root is an absolute path (file:///dir)")
        path = unquote(parts.path)
        if not os.path.isdir(path):
            raise ValueError(f"{root}: no such directory")
        return LocalDirectoryStore(path)
    if parts.scheme == "s3":
        if not parts.netloc:
            raise ValueError(f"{root}: an s3:// root needs a bucket")
        config = S3Config(
            bucket=parts.netloc,
            prefix=unquote(parts.path),
            region=region,
            endpoint_url=endpoint_url,
            path_style_access=endpoint_url is not None,
        )
        return S3ObjectStore(config)
    raise ValueError(f"{root}: the root must be a file:// or s3:// URL")
