"""Names of the files in a partition directory, exactly as Kafka names them.

Segment files are named after their base offset, zero-padded to 20 digits so that `ls` sorts
them numerically: `00000000000000001234.log`, `.index`, `.timeindex`, `.txnindex`, and producer
state snapshots `<offset>.snapshot`. Files on their way out carry an extra suffix:
`.deleted` (scheduled for asynchronous deletion), `.cleaned` (being written by the log cleaner)
and `.swap` (about to replace segments); a partition directory scheduled for deletion ends in
`-delete`.
"""

from __future__ import annotations

import os

__all__ = [
    "CLEANED_FILE_SUFFIX",
    "DELETED_FILE_SUFFIX",
    "DELETE_DIR_SUFFIX",
    "INDEX_FILE_SUFFIX",
    "LOG_FILE_SUFFIX",
    "SNAPSHOT_FILE_SUFFIX",
    "SWAP_FILE_SUFFIX",
    "TIME_INDEX_FILE_SUFFIX",
    "TXN_INDEX_FILE_SUFFIX",
    "filename_prefix_from_offset",
    "log_file",
    "offset_from_file_name",
    "offset_index_file",
    "producer_snapshot_file",
    "time_index_file",
    "transaction_index_file",
]

LOG_FILE_SUFFIX = ".log"
INDEX_FILE_SUFFIX = ".index"
TIME_INDEX_FILE_SUFFIX = ".timeindex"
TXN_INDEX_FILE_SUFFIX = ".txnindex"
SNAPSHOT_FILE_SUFFIX = ".snapshot"
DELETED_FILE_SUFFIX = ".deleted"
CLEANED_FILE_SUFFIX = ".cleaned"
SWAP_FILE_SUFFIX = ".swap"
DELETE_DIR_SUFFIX = "-delete"

_PREFIX_DIGITS = 20


def filename_prefix_from_offset(offset: int) -> str:
    """The 20-digit zero-padded decimal form of `offset` that starts every segment file name."""
    if offset < 0:
        raise ValueError(f"Cannot name a file after the negative offset {offset}")
    return f"{offset:0{_PREFIX_DIGITS}d}"


def offset_from_file_name(name: str) -> int:
    """The offset a segment file is named after: the digits before the first '.'.

    Raises ValueError when the name does not start with decimal digits followed by a '.'.
    """
    prefix, dot, _ = name.partition(".")
    if not dot or not prefix.isascii() or not prefix.isdigit():
        raise ValueError(f"Not a segment file name: {name!r}")
    return int(prefix)


def _file(directory: str | os.PathLike[str], offset: int, suffix: str, extra: str) -> str:
    return os.path.join(directory, f"{filename_prefix_from_offset(offset)}{suffix}{extra}")


def log_file(directory: str | os.PathLike[str], offset: int, suffix: str = "") -> str:
    """`<dir>/<offset>.log<suffix>`; `suffix` is "" or one of the `.deleted`-style suffixes."""
    return _file(directory, offset, LOG_FILE_SUFFIX, suffix)


def offset_index_file(directory: str | os.PathLike[str], offset: int, suffix: str = "") -> str:
    """`<dir>/<offset>.index<suffix>`."""
    return _file(directory, offset, INDEX_FILE_SUFFIX, suffix)


def time_index_file(directory: str | os.PathLike[str], offset: int, suffix: str = "") -> str:
    """`<dir>/<offset>.timeindex<suffix>`."""
    return _file(directory, offset, TIME_INDEX_FILE_SUFFIX, suffix)


def transaction_index_file(directory: str | os.PathLike[str], offset: int, suffix: str = "") -> str:
    """`<dir>/<offset>.txnindex<suffix>`."""
    return _file(directory, offset, TXN_INDEX_FILE_SUFFIX, suffix)


def producer_snapshot_file(directory: str | os.PathLike[str], offset: int) -> str:
    """`<dir>/<offset>.snapshot`, where `offset` is the snapshot's (exclusive) end offset."""
    return _file(directory, offset, SNAPSHOT_FILE_SUFFIX, "")
