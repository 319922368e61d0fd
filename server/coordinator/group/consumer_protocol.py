"""The topics of a consumer's subscription (Kafka's ConsumerProtocolSubscription).

A classic group with protocol type "consumer" carries, per member and protocol, the
member's subscription as opaque bytes that only clients interpret. The coordinator reads
just the topic list, for offset expiration and OffsetDelete. Every version of the
subscription starts with the version 0 layout (big-endian, never flexible):

    version  int16
    topics   int32 count, then per topic an int16 length and UTF-8 name
    ...      user data, owned partitions, generation, rack: later fields, not read
"""

from __future__ import annotations

import struct
from typing import Final

CONSUMER_PROTOCOL_TYPE: Final = "consumer"

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


def subscribed_topics(subscription: bytes) -> frozenset[str] | None:
    """The topics of a subscription, or None when the bytes do not parse (then, as in
    Kafka, the coordinator does not know what the group consumes)."""
    try:
        pos = _INT16.size
        (count,) = _INT32.unpack_from(subscription, pos)
        pos += _INT32.size
        if count < 0:
            return None
        topics = []
        for _ in range(count):
            (length,) = _INT16.unpack_from(subscription, pos)
            pos += _INT16.size
            if length < 0 or pos + length > len(subscription):
                return None
            topics.append(subscription[pos : pos + length].decode())
            pos += length
    except (struct.error, UnicodeDecodeError):
        return None
    return frozenset(topics)
