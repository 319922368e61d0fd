"""The reader's broker tail (tiered.reader.broker_tail) against a real broker process:
records produced by librdkafka with every codec, headers, null keys and values into
three partitions of a tiered topic whose older segments have left the local log (so a
range from offset 0 is served by the broker from the remote tier), read back row for row
as a confluent-kafka consumer reads them — whole partitions, ranges that start and end
inside batches, fetches so small that responses end in partial batches; topic and
high-watermark lookups; and the errors: an unknown topic, offsets deleted or past the
log end, no broker listening, each a BrokerTailError within the timeout; and in a
three-broker cluster, the leader found through another broker and followed when it
dies."""

from __future__ import annotations

import itertools
import socket
import threading
import time
from collections.abc import Iterator
from typing import Final

import kafka
import pyarrow as pa
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from support.broker import BrokerProcess
from support.clients import (
    Outgoing,
    Record,
    consume,
    create_topic,
    now_ms,
    produce,
    running_broker,
    wait_until,
)
from support.cluster import ClusterProcess
from tiercel.protocol.record_batch import read_header
from tiercel.tiered.reader import broker_tail
from tiercel.tiered.reader.broker_client import BrokerCluster, Deadline
from tiercel.tiered.reader.broker_tail import (
    BrokerTailError,
    describe_topics,
    high_watermarks,
    read_broker_range,
)
from tiercel.tiered.reader.record_batches import whole_batches
from tiercel.tiered.reader.record_columns import kafka_source_schema

BROKER_OVERRIDES: Final = {
    "remote.log.storage.system.enable": "true",
    "remote.log.manager.task.interval.ms": 200,
    "log.retention.check.interval.ms": 200,
}
TOPIC: Final = "tail"
DELETED: Final = "tail-deleted"
PARTITIONS: Final = (0, 1, 2)
CODECS: Final = ("none", "gzip", "snappy", "lz4", "zstd")
ROUNDS: Final = 10  # the codecs twice
PER_ROUND: Final = 12  # records per partition per round: one batch each (linger)
BASE_TS: Final = now_ms() - 3_600_000


def outgoing(round_no: int, partition: int) -> list[Outgoing]:
    """Null keys and values, empty values, headers (a null header value), sizes that vary."""
    out = []
    for i in range(PER_ROUND):
        n = (round_no * PER_ROUND + i) * 3 + partition
        key = None if n % 7 == 0 else b"key-%d" % n
        value = None if n % 11 == 0 else (b"" if n % 13 == 0 else b"value %d " % n * (n % 9 + 1))
        headers = (("h", b"%d" % n), ("null", None))[: n % 3]
        out.append(Outgoing(partition, value, key, headers, BASE_TS + n))
    return out


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("broker_tail"), BROKER_OVERRIDES) as broker:
        config = {
            "remote.storage.enable": "true",
            "segment.bytes": "2048",
            "local.retention.bytes": "1",
            "file.delete.delay.ms": "300",
        }
        create_topic(broker.bootstrap, TOPIC, len(PARTITIONS), config)
        for round_no in range(ROUNDS):
            records = [r for p in PARTITIONS for r in outgoing(round_no, p)]
            settings = {"compression.type": CODECS[round_no % len(CODECS)], "linger.ms": 50}
            produce("confluent", broker.bootstrap, TOPIC, records, settings)
        # Older segments tiered, then gone from the local log: offset 0 is remote only.
        ok = wait_until(lambda: min(local_starts(broker).values()) > PER_ROUND * 2, 30)
        assert ok, (local_starts(broker), high_watermarks(broker.bootstrap, TOPIC, PARTITIONS))
        yield broker


def local_starts(broker: BrokerProcess) -> dict[int, int]:
    admin = kafka.KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        specs = {
            kafka.TopicPartition(TOPIC, p): kafka.OffsetSpec.EARLIEST_LOCAL for p in PARTITIONS
        }
        return {
            tp.partition: found.offset for tp, found in admin.list_partition_offsets(specs).items()
        }
    finally:
        admin.close()


@pytest.fixture(scope="module")
def consumed(broker: BrokerProcess) -> dict[int, list[Record]]:
    """What librdkafka reads of every partition from offset 0."""
    total = ROUNDS * PER_ROUND * len(PARTITIONS)
    by_partition = consume("confluent", broker.bootstrap, TOPIC, total, PARTITIONS).by_partition()
    assert {p: len(r) for p, r in by_partition.items()} == {
        p: ROUNDS * PER_ROUND for p in PARTITIONS
    }
    return by_partition


def records_of(batches: list[pa.RecordBatch]) -> list[Record]:
    table = pa.Table.from_batches(batches, kafka_source_schema(True))
    assert set(table.column("topic").to_pylist()) <= {TOPIC}
    # A record without headers has null headers, as in Spark's Kafka source, never [].
    assert [] not in table.column("headers").to_pylist()
    return [
        Record(
            r["partition"],
            r["offset"],
            r["key"],
            r["value"],
            tuple((h["key"], h["value"]) for h in r["headers"] or ()),
            int(r["timestamp"].timestamp() * 1000),
            r["timestampType"],
        )
        for r in table.to_pylist()
    ]


def read(broker: BrokerProcess, partition: int, first: int, last: int) -> list[Record]:
    return records_of(
        list(read_broker_range(broker.bootstrap, TOPIC, partition, first, last, True, 10.0))
    )


def test_describe_topics_lists_partitions_and_leaves_out_unknown_ones(
    broker: BrokerProcess,
) -> None:
    assert describe_topics(broker.bootstrap, [TOPIC, "no-such-topic"]) == {TOPIC: [0, 1, 2]}
    # A committed offset creates __consumer_offsets, internal in Metadata as in Kafka.
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "tail-commit"})
    try:
        consumer.commit(offsets=[TopicPartition(TOPIC, 0, 1)], asynchronous=False)
    finally:
        consumer.close()
    every = describe_topics(broker.bootstrap)
    assert every[TOPIC] == [0, 1, 2]
    assert "__consumer_offsets" not in every
    assert "__consumer_offsets" in describe_topics(broker.bootstrap, ["__consumer_offsets"])


def test_high_watermarks_are_the_log_ends(broker: BrokerProcess) -> None:
    ends = high_watermarks(broker.bootstrap, TOPIC, PARTITIONS)
    assert ends == {p: ROUNDS * PER_ROUND for p in PARTITIONS}


def test_whole_partitions_read_as_librdkafka_reads_them(
    broker: BrokerProcess, consumed: dict[int, list[Record]]
) -> None:
    assert min(local_starts(broker).values()) > 0  # the first part comes from the remote tier
    for partition in PARTITIONS:
        assert read(broker, partition, 0, ROUNDS * PER_ROUND - 1) == consumed[partition]


def test_ranges_inside_batches(broker: BrokerProcess, consumed: dict[int, list[Record]]) -> None:
    # Each round is mostly one batch (linger), but a loaded machine may cut a round in
    # two: the ranges are placed by the batches the broker holds.
    bases = batch_bases(broker, 1)
    base, following = next((b, n) for b, n in itertools.pairwise(bases) if n - b >= 3)
    local_start = local_starts(broker)[1]
    end = ROUNDS * PER_ROUND - 1
    for first, last in [
        (5, 5),
        (base + 1, following - 2),  # inside one batch
        (following - 1, following),  # across a batch boundary
        (7, 4 * PER_ROUND + 3),
        (local_start - 3, local_start + 2),  # from the remote tier into the local log
        (end - 5, end - 1),
    ]:
        want = [r for r in consumed[1] if first <= r.offset <= last]
        assert read(broker, 1, first, last) == want, (first, last)


def test_small_fetches_end_in_partial_batches_and_repeat(
    broker: BrokerProcess, consumed: dict[int, list[Record]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A limit below most batches' size: the broker returns the first batch whole
    # (KIP-74) and cuts the rest, which the next fetch starts with.
    monkeypatch.setattr(broker_tail, "FETCH_MAX_BYTES", 600)
    requests = counting_requests(monkeypatch)
    assert read(broker, 2, 3, ROUNDS * PER_ROUND - 2) == consumed[2][3:-1]
    assert requests["fetch"] >= ROUNDS


def test_a_read_stopped_early_leaves_no_thread(
    broker: BrokerProcess, consumed: dict[int, list[Record]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # One Arrow batch per record, and small responses: the next fetch is in flight (or
    # done) when the caller stops after the first batch.
    monkeypatch.setattr(broker_tail, "FETCH_MAX_BYTES", 600)
    last = ROUNDS * PER_ROUND - 1
    batches = read_broker_range(broker.bootstrap, TOPIC, 0, 0, last, True, batch_bytes=1)
    first = next(batches)
    assert records_of([first]) == consumed[0][: first.num_rows]
    assert first.num_rows < ROUNDS * PER_ROUND
    assert [t for t in threading.enumerate() if t.name.startswith("tiercel-broker-tail")]
    batches.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("tiercel-broker-tail")]


def counting_requests(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    counts = {"fetch": 0}
    fetch = broker_tail._fetch

    def counted(*args: object) -> object:
        counts["fetch"] += 1
        return fetch(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(broker_tail, "_fetch", counted)
    return counts


def batch_bases(broker: BrokerProcess, partition: int) -> list[int]:
    """Base offsets of the partition's batches, from whole Fetch responses."""
    deadline = Deadline(10)
    bases: list[int] = []
    with BrokerCluster(broker.bootstrap, deadline) as cluster:
        offset = 0
        while offset < ROUNDS * PER_ROUND:
            address = cluster.leader(TOPIC, partition)
            records = broker_tail._fetch(cluster, address, TOPIC, partition, offset).records
            for at, _ in whole_batches(records):
                header = read_header(records, at)
                if header.base_offset >= offset:
                    bases.append(header.base_offset)
                offset = max(offset, header.next_offset)
    return bases


def test_an_unknown_topic_fails_within_the_timeout(broker: BrokerProcess) -> None:
    started = time.monotonic()
    with pytest.raises(BrokerTailError, match=r"no-such-topic.*UNKNOWN_TOPIC_OR_PARTITION"):
        list(read_broker_range(broker.bootstrap, "no-such-topic", 0, 0, 10, timeout_s=2))
    with pytest.raises(BrokerTailError, match="no-such-topic"):
        high_watermarks(broker.bootstrap, "no-such-topic", [0], timeout_s=2)
    assert time.monotonic() - started < 5


def test_deleted_offsets_are_out_of_range(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, DELETED)
    produce("confluent", broker.bootstrap, DELETED, [Outgoing(0, b"v%d" % i) for i in range(20)])
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_records([TopicPartition(DELETED, 0, 10)])[TopicPartition(DELETED, 0)].result(10)
    started = time.monotonic()
    gone = r"OFFSET_OUT_OF_RANGE.*offsets 5-15.*log start 10, high watermark 20"
    with pytest.raises(BrokerTailError, match=gone):
        list(read_broker_range(broker.bootstrap, DELETED, 0, 5, 15))
    with pytest.raises(BrokerTailError, match="OFFSET_OUT_OF_RANGE"):
        list(read_broker_range(broker.bootstrap, DELETED, 0, 25, 30))
    assert time.monotonic() - started < 5
    # Still there: the offsets after the deleted ones.
    batches = list(read_broker_range(broker.bootstrap, DELETED, 0, 10, 19))
    assert pa.Table.from_batches(batches).column("value").to_pylist() == [
        b"v%d" % i for i in range(10, 20)
    ]


def test_offsets_past_the_high_watermark_fail_within_the_timeout(broker: BrokerProcess) -> None:
    end = ROUNDS * PER_ROUND
    started = time.monotonic()
    with pytest.raises(BrokerTailError, match=f"past the high watermark {end}"):
        list(read_broker_range(broker.bootstrap, TOPIC, 0, end - 1, end, timeout_s=1.5))
    assert time.monotonic() - started < 4


def test_no_broker_listening_fails_within_the_timeout() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # free once closed; nothing listens there
    bootstrap = f"127.0.0.1:{port}"
    started = time.monotonic()
    with pytest.raises(BrokerTailError, match=f"{bootstrap}.*cannot connect"):
        list(read_broker_range(bootstrap, TOPIC, 0, 0, 10, timeout_s=1.5))
    with pytest.raises(BrokerTailError, match=f"{bootstrap}.*cannot connect"):
        describe_topics(bootstrap, timeout_s=1.5)
    assert time.monotonic() - started < 5
    with pytest.raises(BrokerTailError, match="bad bootstrap server"):
        describe_topics("localhost")


def test_the_tail_finds_the_leader_and_follows_it_when_it_dies(
    cluster: ClusterProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three brokers: the read asks a broker that leads nothing of the partition and is
    sent to the leader; with the leader SIGKILLed, the next read starts on stale
    metadata (connections refused until the controller, seconds later, elects another
    leader) and retries until the new leader serves it."""
    cluster.create_topic("moving", 1, replication_factor=3)
    records = [Outgoing(0, b"m%d" % i) for i in range(60)]
    produce("confluent", cluster.bootstrap(), "moving", records)
    leader = cluster.leader_of("moving", 0)
    other = next(node for node in cluster.running() if node != leader)
    want = [b"m%d" % i for i in range(60)]

    def values(bootstrap: str) -> list[bytes]:
        batches = list(read_broker_range(bootstrap, "moving", 0, 0, 59, timeout_s=30))
        return pa.Table.from_batches(batches).column("value").to_pylist()  # type: ignore[no-any-return]

    assert values(cluster.bootstrap([other])) == want
    cluster.wait_until_isr("moving", 0, cluster.running())
    retried: list[str] = []
    backoff = Deadline.backoff

    def counted(self: Deadline, error: str) -> None:
        retried.append(error)
        backoff(self, error)

    monkeypatch.setattr(Deadline, "backoff", counted)
    cluster.kill(leader)
    # The dead leader first among the bootstrap servers, and still leader in Metadata.
    assert values(cluster.bootstrap([leader, other])) == want
    assert any("cannot connect" in error for error in retried), retried
    assert cluster.leader_of("moving", 0) not in (leader, -1)
    assert high_watermarks(cluster.bootstrap([other]), "moving", [0]) == {0: 60}
