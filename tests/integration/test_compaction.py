"""Log compaction on a real broker, seen from clients and on disk.

A compacted topic with 1 KiB segments gets several values per key from librdkafka
(compressed batches of two), tombstones for some keys, and records with keys of their
own that push the rest out of the active segment. The cleaner (backing off 100 ms)
keeps the latest value of each key at the offset it was produced at, so a consumer from
the beginning sees offsets that increase with gaps; tombstones stay until
``delete.retention.ms`` has passed since the cleaning that first kept them, and go in
the next cleaning after that. A restart, clean or after SIGKILL, keeps the compacted
log as it is.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Final

import pytest

from support.broker import BrokerProcess
from support.clients import (
    Delivered,
    Outgoing,
    Record,
    consume,
    create_topic,
    produce,
    running_broker,
)

TOPIC: Final = "compacted"
RETENTION_MS: Final = 2_000
TOPIC_CONFIG: Final = {
    "cleanup.policy": "compact",
    "segment.bytes": "1024",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": str(RETENTION_MS),
    "file.delete.delay.ms": "100",
}
PRODUCER: Final = {"batch.num.messages": 2, "linger.ms": 5, "compression.type": "gzip"}
KEYS: Final = [b"key-%d" % i for i in range(10)]
DELETED: Final = KEYS[:3]


def _value(key: bytes, generation: int) -> bytes:
    return key + b"@%d:" % generation + b"v" * 60


def _fillers(first: int, count: int) -> list[Outgoing]:
    """Records with keys of their own: compaction keeps them all."""
    return [Outgoing(0, b"f" * 80, b"filler-%03d" % i) for i in range(first, first + count)]


def _cleaned_up_to(broker: BrokerProcess) -> int:
    """The partition's first dirty offset in the broker's cleaner-offset-checkpoint."""
    path = broker.log_dir / "cleaner-offset-checkpoint"
    if not path.exists():
        return -1
    for line in path.read_text().splitlines()[2:]:
        topic, partition, offset = line.split()
        if (topic, partition) == (TOPIC, "0"):
            return int(offset)
    return -1


def _wait_cleaned(broker: BrokerProcess, offset: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while _cleaned_up_to(broker) < offset:
        assert time.monotonic() < deadline, f"not cleaned up to {offset}:\n{broker.tail()}"
        time.sleep(0.05)


def _produce(broker: BrokerProcess, records: Sequence[Outgoing]) -> list[Delivered]:
    return produce("confluent", broker.bootstrap, TOPIC, records, PRODUCER)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = {"log.cleaner.backoff.ms": 100}
    with running_broker(tmp_path_factory.mktemp("compaction"), overrides) as started:
        create_topic(started.bootstrap, TOPIC, config=TOPIC_CONFIG)
        yield started


def _read_all(broker: BrokerProcess, client: str, count: int) -> list[Record]:
    records = consume(client, broker.bootstrap, TOPIC, count).records
    offsets = [r.offset for r in records]
    assert offsets == sorted(set(offsets)), f"{client}: offsets must strictly increase"
    return records


def test_latest_value_per_key_at_its_original_offset_and_deleted_keys_go(
    broker: BrokerProcess,
) -> None:
    writes = [Outgoing(0, _value(key, g), key) for g in range(4) for key in KEYS]
    writes.append(Outgoing(0, _value(KEYS[5], 4), KEYS[5]))  # leaves a gap among the latest
    writes += [Outgoing(0, None, key) for key in DELETED]
    fillers = _fillers(0, 16)
    delivered = _produce(broker, writes + fillers)
    offset_of = {}
    for write, d in zip(writes, delivered[: len(writes)], strict=True):
        offset_of[write.key] = (d.offset, write.value)  # the last write of a key wins
    filler_offsets = {
        d.offset: w.key for w, d in zip(fillers, delivered[len(writes) :], strict=True)
    }
    last_tombstone = max(offset_of[key][0] for key in DELETED)

    # First cleaning: one record per key, at its original offset; tombstones kept.
    _wait_cleaned(broker, last_tombstone + 1)
    cleaned_at = time.monotonic()
    expected = {key: offset_of[key] for key in KEYS}
    for client in ("confluent", "kafka-python"):
        records = _read_all(broker, client, len(KEYS) + len(fillers))
        keyed = {r.key: (r.offset, r.value) for r in records if r.key in offset_of}
        assert keyed == expected, client
        assert len([r for r in records if r.key in offset_of]) == len(KEYS)
        assert {r.offset: r.key for r in records if r.key not in offset_of} == filler_offsets
        assert records[0].offset > 0  # the low watermark stays 0: a gap before
        assert records[-1].offset - records[0].offset + 1 > len(records)  # gaps between
    assert not list(broker.log_dir.glob(f"{TOPIC}-0/*.cleaned"))

    # Past delete.retention.ms, the next cleaning (more records make the log dirty
    # again) removes the tombstones; every other record stays where it was.
    time.sleep(max(0.0, RETENTION_MS / 1000 + 0.2 - (time.monotonic() - cleaned_at)))
    before = _cleaned_up_to(broker)
    more = _fillers(16, 16)
    delivered_more = _produce(broker, more)
    filler_offsets.update({d.offset: w.key for w, d in zip(more, delivered_more, strict=True)})
    _wait_cleaned(broker, before + 1)
    survivors = {key: offset_of[key] for key in KEYS if key not in DELETED}
    count = len(survivors) + len(filler_offsets)
    records = _read_all(broker, "confluent", count)
    assert {r.key: (r.offset, r.value) for r in records if r.key in offset_of} == survivors
    assert {r.offset: r.key for r in records if r.key not in offset_of} == filler_offsets

    # A restart keeps the compacted log and its checkpoint; so does a crash (the
    # recovery scan reads the cleaned segments, gaps and empty batches included).
    checkpoint = _cleaned_up_to(broker)
    for crash in (False, True):
        if crash:
            broker.kill()
            broker.start()
        else:
            broker.restart()
        assert _cleaned_up_to(broker) == checkpoint
        after = _read_all(broker, "confluent", count)
        assert [(r.offset, r.key, r.value) for r in after] == [
            (r.offset, r.key, r.value) for r in records
        ]
    names = [p.name for p in Path(broker.log_dir, f"{TOPIC}-0").iterdir()]
    assert not [n for n in names if n.endswith((".cleaned", ".swap"))]
