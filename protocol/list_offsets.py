"""ListOffsets (API key 2): the request's special values (Kafka's ListOffsetsRequest).

A partition's ``timestamp`` is either a time in ms since the epoch (the first offset
whose record timestamp is at or after it) or one of the negative specs below, each
valid from the request version that introduced it (Kafka's
``ReplicaManager.timestampMinSupportedVersion``); any other negative value is
UNSUPPORTED_VERSION. ``replica_id`` is -1 for consumers, -2 for debugging tools (they
may ask a follower), a broker id for a follower; ``isolation_level`` (v2+) is 0
read_uncommitted, 1 read_committed.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Final

CONSUMER_REPLICA_ID: Final = -1
DEBUGGING_REPLICA_ID: Final = -2

LATEST_TIMESTAMP: Final = -1
EARLIEST_TIMESTAMP: Final = -2
MAX_TIMESTAMP: Final = -3  # KIP-734
EARLIEST_LOCAL_TIMESTAMP: Final = -4  # KIP-405
LATEST_TIERED_TIMESTAMP: Final = -5  # KIP-1005
EARLIEST_PENDING_UPLOAD_TIMESTAMP: Final = -6  # KIP-1023

TIMESTAMP_MIN_SUPPORTED_VERSION: Final = {
    EARLIEST_TIMESTAMP: 1,
    LATEST_TIMESTAMP: 1,
    MAX_TIMESTAMP: 7,
    EARLIEST_LOCAL_TIMESTAMP: 8,
    LATEST_TIERED_TIMESTAMP: 9,
    EARLIEST_PENDING_UPLOAD_TIMESTAMP: 11,
}
# Older clients get LEADER_NOT_AVAILABLE instead of OFFSET_NOT_AVAILABLE (KIP-207).
OFFSET_NOT_AVAILABLE_MIN_VERSION: Final = 5


class IsolationLevel(IntEnum):
    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1


def is_timestamp_unsupported(timestamp: int, version: int) -> bool:
    """Kafka's ReplicaManager.isListOffsetsTimestampUnsupported."""
    if timestamp >= 0:
        return False
    min_version = TIMESTAMP_MIN_SUPPORTED_VERSION.get(timestamp)
    return min_version is None or version < min_version
