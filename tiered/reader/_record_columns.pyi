# Types of the C extension _record_columns.c (the native decoder of record_columns).
from typing import TypeAlias

class Buffer:
    """Read-only bytes of one column buffer (the buffer protocol), owned by this object."""

    def __len__(self) -> int: ...

# (int32 offsets, data, validity bitmap or None when no nulls, null count)
BinaryBuffers: TypeAlias = tuple[Buffer, Buffer, Buffer | None, int]

class Columns:
    def __init__(self, include_headers: bool) -> None: ...
    @property
    def batch_bytes(self) -> int: ...
    @property
    def include_headers(self) -> bool: ...
    def __len__(self) -> int: ...
    def append_records(
        self,
        records: bytes | bytearray | memoryview,
        count: int,
        base_offset: int,
        base_timestamp: int,
        log_append_time: int | None,
        first_offset: int,
        last_offset: int,
        start: int,
        batch_bytes: int,
    ) -> tuple[int, int]: ...
    def take(
        self,
    ) -> tuple[
        int,  # rows
        Buffer,  # offsets, int64
        Buffer,  # timestamps, int64
        Buffer,  # timestamp types, int32
        BinaryBuffers,  # keys
        BinaryBuffers,  # values
        # header list offsets, their validity (None when every row has headers), null
        # count, header keys, header values
        tuple[Buffer, Buffer | None, int, BinaryBuffers, BinaryBuffers] | None,
    ]: ...
