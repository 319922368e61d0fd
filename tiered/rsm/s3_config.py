"""Where the S3 tier is and how to reach it: the settings of `S3RemoteStorageManager`
and `S3ObjectStore`, apart from them so that reading the broker's configuration never
imports boto3 (about 0.3 s), which only a broker tiering to S3 needs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["DEFAULT_PART_SIZE_BYTES", "MIB", "S3Config"]

MIB: Final = 1024 * 1024
# S3 takes parts of 5 MiB to 5 GiB (the last may be smaller); 8 MiB is the AWS CLI's default.
DEFAULT_PART_SIZE_BYTES: Final = 8 * MIB


@dataclass(frozen=True, slots=True)
class S3Config:
    """Where the tier is and how to reach it. ``prefix`` is normalised to end in ``/``
    (or be empty); timeouts are in seconds; ``max_attempts`` counts the first try."""

    bucket: str
    prefix: str = ""
    region: str | None = None
    endpoint_url: str | None = None
    part_size_bytes: int = DEFAULT_PART_SIZE_BYTES
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 30.0
    max_attempts: int = 3
    path_style_access: bool = False

    def __post_init__(self) -> None:
        if not self.bucket:
            raise ValueError("an S3 bucket name is required")
        if self.part_size_bytes <= 0:
            raise ValueError(f"bad multipart part size {self.part_size_bytes}")
        if self.connect_timeout_s <= 0 or self.read_timeout_s <= 0:
            raise ValueError("S3 timeouts must be positive")
        if self.max_attempts < 1:
            raise ValueError(f"bad S3 max attempts {self.max_attempts}")
        prefix = self.prefix.strip("/")
        object.__setattr__(self, "prefix", f"{prefix}/" if prefix else "")
