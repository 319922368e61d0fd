"""Which partition of a coordinator's internal topic owns a key.

Kafka places a group (``GroupCoordinatorService.partitionFor``, classic
``GroupMetadataManager.partitionFor``) and a transactional id
(``TransactionStateManager.partitionFor``) by the same rule:
``Utils.abs(key.hashCode) % partitions``. ``hashCode`` is Java's ``String.hashCode``
and ``Utils.abs`` maps Integer.MIN_VALUE to 0 (``Math.abs`` would keep it negative).
Matching it exactly lets clients, tools and a log directory written by Kafka agree with
this broker on where each group's offsets and each transaction's state live.
"""

from __future__ import annotations

from typing import Final

_INT_MIN: Final = -(2**31)


def java_string_hash(value: str) -> int:
    """Java's String.hashCode: 31-based over UTF-16 code units, in int32 arithmetic (a
    character outside the BMP counts as its two surrogates)."""
    h = 0
    units = value.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def utils_abs(n: int) -> int:
    """Kafka's Utils.abs on an int32: |n|, and 0 for Integer.MIN_VALUE."""
    return 0 if n == _INT_MIN else abs(n)


def partition_for(key: str, partitions: int) -> int:
    """The partition of ``key`` (group id, transactional id) among ``partitions``."""
    return utils_abs(java_string_hash(key)) % partitions
