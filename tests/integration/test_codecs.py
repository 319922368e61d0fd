"""gzip, snappy, lz4 and zstd batches from librdkafka, aiokafka and kafka-python.

Each codec's batches come back byte-identical to every consumer that has the codec —
including one that starts inside a compressed batch — and are stored as the producer
compressed them (checked on disk: the codec bits of every batch header in the segment).
kafka-python has only gzip here (its other codecs need libraries that are not
installed), so it produces and consumes gzip only.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.broker import BrokerProcess
from support.clients import CLIENTS, Outgoing, consume, create_topic, produce, running_broker

CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
_PRODUCER_SETTING = {
    "confluent": "compression.type",
    "aiokafka": "compression_type",
    "kafka-python": "compression_type",
}
# Enough records that each producer sends several of them per (compressed) batch.
LINGER = {"confluent": {"linger.ms": 20}, "aiokafka": {"linger_ms": 20}, "kafka-python": {}}
RECORDS_PER_PRODUCER = 60
# Record batch v2 header: baseOffset int64, batchLength int32, partitionLeaderEpoch int32,
# magic int8, crc uint32, attributes int16 (codec in the low 3 bits), lastOffsetDelta int32.
_ATTRIBUTES_AT = 8 + 4 + 4 + 1 + 4
_LAST_OFFSET_DELTA_AT = _ATTRIBUTES_AT + 2


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("compression")) as broker:
        yield broker


def _clients_with(codec: str) -> list[str]:
    return [c for c in CLIENTS if codec == "gzip" or c != "kafka-python"]


def _records(partition: int, producer: str) -> list[Outgoing]:
    records = []
    for i in range(RECORDS_PER_PRODUCER):
        if i % 10 == 3:
            value = os.urandom(300)  # incompressible
        elif i % 10 == 7:
            value = None
        else:
            value = (b"%s record %d; " % (producer.encode(), i)) * (1 + i % 40)
        headers = (("i", b"%d" % i), ("codec-test", b"\x00\xff")) if i % 2 else ()
        records.append(Outgoing(partition, value, b"key-%d" % (i % 7), headers))
    return records


def batch_codecs(partition_dir: Path) -> list[tuple[int, int]]:
    """(codec, record count) of every batch in the partition's segments, from disk."""
    codecs = []
    for segment in sorted(partition_dir.glob("*.log")):
        data = segment.read_bytes()
        position = 0
        while position + _LAST_OFFSET_DELTA_AT + 4 <= len(data):
            (length,) = struct.unpack_from(">i", data, position + 8)
            (attributes,) = struct.unpack_from(">h", data, position + _ATTRIBUTES_AT)
            (last_delta,) = struct.unpack_from(">i", data, position + _LAST_OFFSET_DELTA_AT)
            codecs.append((attributes & 0x7, last_delta + 1))
            position += 12 + length
    return codecs


def _cases() -> list[Any]:
    # librdkafka compresses lz4 only for brokers that advertise FindCoordinator (its
    # proxy for Kafka >= 0.8.2), which the group coordinator made true.
    return [
        pytest.param(codec, producer, id=f"{codec}-{producer}")
        for codec in CODECS
        for producer in _clients_with(codec)
    ]


@pytest.mark.parametrize(("codec", "producer"), _cases())
def test_codec_round_trip(shared: BrokerProcess, codec: str, producer: str) -> None:
    topic = f"codec-{codec}-{producer}"
    create_topic(shared.bootstrap, topic, 1)
    sent = _records(0, producer)
    config = {_PRODUCER_SETTING[producer]: codec, **LINGER[producer]}
    delivered = produce(producer, shared.bootstrap, topic, sent, config)
    assert [d.offset for d in delivered] == list(range(len(sent)))

    for consumer in _clients_with(codec):
        got = consume(consumer, shared.bootstrap, topic, len(sent))
        assert [r.offset for r in got.records] == list(range(len(sent))), consumer
        assert [(r.key, r.value, r.headers) for r in got.records] == [
            (r.key, r.value, r.headers) for r in sent
        ], f"{consumer} read back different bytes"

    # Starting inside a compressed batch: the client drops the records before its offset.
    consumer = _clients_with(codec)[-1]
    got = consume(consumer, shared.bootstrap, topic, len(sent) - 25, start={0: 25})
    assert [(r.offset, r.value) for r in got.records] == [
        (i, r.value) for i, r in enumerate(sent) if i >= 25
    ]

    batches = batch_codecs(shared.log_dir / f"{topic}-0")
    assert len(batches) < len(sent), "the producer did not batch"
    # librdkafka sends a batch uncompressed when compressing does not make it smaller
    # (a lone short record): no other codec, and nearly all records compressed.
    assert {c for c, _ in batches} <= {0, CODECS[codec]}, batches
    compressed = sum(n for c, n in batches if c == CODECS[codec])
    assert compressed >= 0.9 * len(sent), f"batches (codec, records): {batches}"


def test_topic_compression_type_recompresses(shared: BrokerProcess) -> None:
    topic = "recompressed-to-gzip"
    create_topic(shared.bootstrap, topic, 1, {"compression.type": "gzip"})
    records = [Outgoing(0, b"plain %d " % i * 20) for i in range(30)]
    produce("confluent", shared.bootstrap, topic, records, {"compression.type": "lz4"})
    got = consume("confluent", shared.bootstrap, topic, len(records))
    assert got.values() == [r.value for r in records]
    assert {c for c, _ in batch_codecs(shared.log_dir / f"{topic}-0")} == {CODECS["gzip"]}
