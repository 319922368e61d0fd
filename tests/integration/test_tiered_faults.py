"""A broker tiering to S3 (moto's server, a private process) while the store is
unreachable: paused with SIGSTOP (connections accepted, never answered) or stopped.

Local produce and consume go on at their usual pace; the copy retries with backoff and
reports its backlog (a WARNING naming the partition and the bytes not yet copied);
local retention deletes no segment that is not yet remote, however small
``local.retention.bytes``; a consumer below the local start gets an empty answer or an
error within about ``remote.fetch.max.wait.ms`` while other partitions are served; and
once the store is back every rolled segment below the high watermark is remote, in
order, with no gap, and reads from offset 0 return every record.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Final

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.list_offsets.v10.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta, i64

from support.broker import BrokerProcess
from support.clients import Outgoing, create_topic, produce, wait_until
from support.moto_server import MotoServer, create_bucket
from support.tiered_s3 import (
    assert_contiguous,
    bucket_segments,
    complete_uploads,
    local_segment_bases,
    local_segment_sizes,
    log_events,
    s3_broker,
    s3_broker_overrides,
)
from support.wire import WireClient

TIERED: Final = {
    "remote.storage.enable": "true",
    "segment.bytes": "2048",
    "local.retention.bytes": "1",
    "file.delete.delay.ms": "300",
}
# acks=all produce and a local fetch answer well within this, store or no store.
LOCAL_LATENCY_S: Final = 1.5
REMOTE_FETCH_MAX_WAIT_S: Final = 0.5  # remote.fetch.max.wait.ms, Kafka's default


def value(i: int) -> bytes:
    return b"%05d:" % i + b"v" * 90


@pytest.fixture
def store(moto_server_factory: Callable[[], MotoServer]) -> MotoServer:
    return moto_server_factory()


@pytest.fixture
def broker(store: MotoServer, tmp_path: Path) -> Iterator[BrokerProcess]:
    bucket = create_bucket(store.endpoint_url, "tier")
    broker = s3_broker(
        tmp_path / "broker",
        s3_broker_overrides(store.endpoint_url, bucket.name, **{"remote.fetch.max.wait.ms": 500}),
    )
    try:
        yield broker.start()
    finally:
        broker.kill()


def produce_range(broker: BrokerProcess, topic: str, first: int, count: int) -> None:
    records = [Outgoing(0, value(i), None, (), None) for i in range(first, first + count)]
    delivered = produce(
        "confluent", broker.bootstrap, topic, records, {"batch.num.messages": 2, "linger.ms": 2}
    )
    assert [d.offset for d in delivered] == list(range(first, first + count))


def timed_produce(broker: BrokerProcess, topic: str, first: int, count: int) -> float:
    """The slowest acks=all delivery of ``count`` records produced one at a time."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0})
    slowest = 0.0
    errors: list[object] = []
    for i in range(first, first + count):
        began = time.monotonic()
        producer.produce(topic, value(i), partition=0, on_delivery=lambda e, m: errors.append(e))
        producer.flush(10)
        assert errors == [None], f"record {i} not delivered: {errors}"
        errors.clear()
        slowest = max(slowest, time.monotonic() - began)
    return slowest


def read(
    broker: BrokerProcess, topic: str, start: int, until: int, timeout: float
) -> list[tuple[int, bytes]]:
    """Records [start, until) of partition 0 as librdkafka reads them in ``timeout``."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "faults",
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
            "fetch.wait.max.ms": 100,
        }
    )
    got: list[tuple[int, bytes]] = []
    try:
        consumer.assign([TopicPartition(topic, 0, start)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and (not got or got[-1][0] < until - 1):
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                got.append((message.offset(), message.value()))
    finally:
        consumer.close()
    return got


def remote_uploads(store: MotoServer, topic: str) -> dict[int, int]:
    return complete_uploads(bucket_segments(store.endpoint_url, "tier", topic))


def incomplete_uploads(store: MotoServer, topic: str) -> list[tuple[int, str, list[str]]]:
    return [
        (s.start_offset, s.segment_id, sorted(s.suffixes))
        for s in bucket_segments(store.endpoint_url, "tier", topic)
        if s.manifest is None
    ]


def all_rolled_remote(broker: BrokerProcess, store: MotoServer, topic: str) -> bool:
    uploads = remote_uploads(store, topic)
    return bool(uploads) and max(uploads.values()) == local_segment_bases(broker, topic)[-1] - 1


def not_yet_remote_bytes(broker: BrokerProcess, topic: str, copied_end: int) -> int:
    """The bytes of rolled local segments above ``copied_end``: the copy backlog."""
    sizes = local_segment_sizes(broker, topic)
    bases = sorted(sizes)
    return sum(sizes[b] for b in bases[:-1] if b > copied_end)


def test_a_paused_store_leaves_local_traffic_alone_and_the_copy_catches_up(
    broker: BrokerProcess, store: MotoServer
) -> None:
    topic, other = "paused", "local-only"
    create_topic(broker.bootstrap, topic, config=TIERED)
    create_topic(broker.bootstrap, other, config={"segment.bytes": "2048"})
    produce_range(broker, other, 0, 50)
    produce_range(broker, topic, 0, 100)
    assert wait_until(lambda: all_rolled_remote(broker, store, topic), 30)
    copied_end = local_segment_bases(broker, topic)[-1] - 1

    store.pause()
    try:
        slowest = timed_produce(broker, topic, 100, 150)
        assert slowest < LOCAL_LATENCY_S, f"an acks=all produce took {slowest:.2f}s"
        # Each copy round now waits for the store, then fails; retention must wait too.
        assert wait_until(
            lambda: any(
                e.fields.get("partition") == f"{topic}-0"
                for e in log_events(broker, "remote_copy_failed")
            ),
            30,
        )
        bases = local_segment_bases(broker, topic)
        assert bases[0] <= copied_end + 1, f"a segment not yet remote was deleted: {bases}"
        backlog = not_yet_remote_bytes(broker, topic, copied_end)
        assert backlog > 0
        assert wait_until(
            lambda: (
                [
                    int(e.fields["backlog_bytes"])
                    for e in log_events(broker, "remote_copy_backlog")
                    if e.fields.get("partition") == f"{topic}-0" and e.level == "WARNING"
                ][-1:]
                == [backlog]
            ),
            30,
        )
        # The recent tail is local: read at once.
        began = time.monotonic()
        tail = read(broker, topic, 200, 250, 10)
        assert tail == [(i, value(i)) for i in range(200, 250)]
        assert time.monotonic() - began < 5
        # Below the local start: an empty answer or an error, in bounded time, and the
        # other partitions are served meanwhile.
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            remote = pool.submit(read, broker, topic, 0, 1, 6)
            time.sleep(1)
            began = time.monotonic()
            assert read(broker, other, 0, 50, 10) == [(i, value(i)) for i in range(50)]
            assert time.monotonic() - began < 5
            assert remote.result(30) == []
        assert local_segment_bases(broker, topic)[0] <= copied_end + 1
    finally:
        store.resume()

    assert wait_until(lambda: all_rolled_remote(broker, store, topic), 60)
    assert_contiguous(remote_uploads(store, topic))
    # The uploads cut short by the outage were deleted, all their objects with them.
    assert wait_until(lambda: incomplete_uploads(store, topic) == [], 30), incomplete_uploads(
        store, topic
    )
    assert read(broker, topic, 0, 250, 60) == [(i, value(i)) for i in range(250)]


def test_a_stopped_store_holds_local_retention_until_the_copy_catches_up(
    broker: BrokerProcess, store: MotoServer
) -> None:
    topic = "stopped"
    store.stop()  # before anything is copied: a restarted moto is empty
    try:
        create_topic(broker.bootstrap, topic, config=TIERED)
        slowest = timed_produce(broker, topic, 0, 150)
        assert slowest < LOCAL_LATENCY_S, f"an acks=all produce took {slowest:.2f}s"
        assert wait_until(
            lambda: (
                sum(
                    e.fields.get("partition") == f"{topic}-0"
                    for e in log_events(broker, "remote_copy_failed")
                )
                >= 3
            ),
            30,
        )
        # Retried with backoff (remote.log.manager.task.retry.backoff.ms 200 doubling to
        # .max.ms 1000, jitter 0.2), and nothing deleted: the whole log is still local.
        failures = [
            e
            for e in log_events(broker, "remote_copy_failed")
            if e.fields["partition"] == f"{topic}-0"
        ]
        assert [int(e.fields["attempt"]) for e in failures] == list(range(1, len(failures) + 1))
        for k, (one, following) in enumerate(itertools.pairwise(failures), 1):
            gap_ms = (following.time - one.time).total_seconds() * 1000
            assert gap_ms >= 0.8 * min(200 * 2 ** (k - 1), 1000) - 2, (k, gap_ms)
        assert local_segment_bases(broker, topic)[0] == 0
        backlog = not_yet_remote_bytes(broker, topic, -1)
        assert [
            int(e.fields["backlog_bytes"])
            for e in log_events(broker, "remote_copy_backlog")
            if e.fields.get("partition") == f"{topic}-0" and e.level == "WARNING"
        ][-1:] == [backlog]
        assert read(broker, topic, 0, 150, 10) == [(i, value(i)) for i in range(150)]
    finally:
        store.start()
    create_bucket(store.endpoint_url, "tier")
    assert wait_until(lambda: all_rolled_remote(broker, store, topic), 60)
    assert_contiguous(remote_uploads(store, topic))
    assert wait_until(lambda: local_segment_bases(broker, topic)[0] > 0, 30)
    assert read(broker, topic, 0, 150, 60) == [(i, value(i)) for i in range(150)]


@pytest.fixture
def patient_broker(store: MotoServer, tmp_path: Path) -> Iterator[BrokerProcess]:
    """S3's default timeouts (30 s a read, 3 attempts): a paused store holds each call
    for minutes; and a small reader pool, which such calls fill."""
    bucket = create_bucket(store.endpoint_url, "tier")
    overrides = s3_broker_overrides(
        store.endpoint_url,
        bucket.name,
        **{"remote.log.reader.threads": 2, "remote.log.reader.max.pending.tasks": 2},
    )
    for key in ("connect.timeout.ms", "read.timeout.ms", "max.attempts"):
        del overrides[f"rsm.config.s3.{key}"]
    broker = s3_broker(tmp_path / "broker", overrides)
    try:
        yield broker.start()
    finally:
        broker.kill()


def fetch_request(offsets: dict[str, int]) -> FetchRequest:
    """A consumer's Fetch v12 of partition 0 of each topic from its offset."""
    return FetchRequest(
        replica_id=i32(-1),
        max_wait=i32Timedelta.parse(timedelta(milliseconds=100)),
        min_bytes=i32(1), max_bytes=i32(1 << 20), isolation_level=i8(0),
        session_id=i32(0), session_epoch=i32(-1),
        topics=tuple(
            FetchTopic(topic=TopicName(topic), partitions=(
                FetchPartition(partition=i32(0), current_leader_epoch=i32(-1),
                               fetch_offset=i64(offset), last_fetched_epoch=i32(-1),
                               log_start_offset=i64(-1), partition_max_bytes=i32(1 << 16)),
            ))
            for topic, offset in offsets.items()
        ),
        forgotten_topics_data=(), rack_id="",
    )  # fmt: skip


def test_remote_reads_of_a_paused_store_answer_in_bounded_time(
    patient_broker: BrokerProcess, store: MotoServer
) -> None:
    broker = patient_broker
    topic, other = "paused-reads", "served"
    create_topic(broker.bootstrap, topic, config=TIERED)
    create_topic(broker.bootstrap, other, config={"segment.bytes": "2048"})
    produce_range(broker, topic, 0, 100)
    produce_range(broker, other, 0, 50)
    assert wait_until(lambda: all_rolled_remote(broker, store, topic), 30)
    assert wait_until(lambda: local_segment_bases(broker, topic)[0] > 0, 30)

    store.pause()
    try:
        # One fetch of a remote offset and a local one: answered within about
        # remote.fetch.max.wait.ms, the local records in it, the remote partition empty
        # or with an error (never UNKNOWN_SERVER_ERROR, a sign of a bug).
        with WireClient(broker.bootstrap, timeout=30) as client:
            for _ in range(3):
                began = time.monotonic()
                response = client.request(fetch_request({topic: 0, other: 0}))
                assert time.monotonic() - began < REMOTE_FETCH_MAX_WAIT_S + 1.5
                answers = {str(t.topic): p for t in response.responses for p in t.partitions}
                assert answers[other].error_code == ErrorCode.none
                assert answers[other].records  # the local partition's records
                assert answers[topic].error_code != ErrorCode.unknown_server_error
                assert not answers[topic].records
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            readers = [pool.submit(read, broker, topic, 0, 1, 8) for _ in range(2)]
            time.sleep(2)
            for _ in range(3):
                began = time.monotonic()
                assert read(broker, other, 0, 50, 10) == [(i, value(i)) for i in range(50)]
                assert time.monotonic() - began < 5
            assert [r.result(30) for r in readers] == [[], []]
    finally:
        store.resume()
    began = time.monotonic()
    assert read(broker, topic, 0, 100, 30) == [(i, value(i)) for i in range(100)]
    assert time.monotonic() - began < 10


@pytest.fixture
def slow_failing_broker(store: MotoServer, tmp_path: Path) -> Iterator[BrokerProcess]:
    """A call to a paused store fails after 4 s: long enough to roll segments during it."""
    bucket = create_bucket(store.endpoint_url, "tier")
    overrides = s3_broker_overrides(
        store.endpoint_url, bucket.name, **{"rsm.config.s3.read.timeout.ms": 4000}
    )
    broker = s3_broker(tmp_path / "broker", overrides)
    try:
        yield broker.start()
    finally:
        broker.kill()


def backlog_at(broker: BrokerProcess, topic: str, copied_end: int, when: datetime) -> int:
    """The bytes of the segments above ``copied_end`` rolled by ``when`` (each closed by
    the roll that began the next), from the roll events and the (not yet deleted) files."""
    sizes = local_segment_sizes(broker, topic)
    closed_by = {
        int(e.fields["base_offset"]): e.time
        for e in log_events(broker, "segment_rolled")
        if e.fields.get("partition") == f"{topic}-0"
    }
    bases = sorted(sizes)
    return sum(
        sizes[base]
        for base, following in itertools.pairwise(bases)
        if base > copied_end and closed_by[following] <= when
    )


def test_the_backlog_warning_reports_the_backlog_when_it_is_logged(
    slow_failing_broker: BrokerProcess, store: MotoServer
) -> None:
    broker, topic = slow_failing_broker, "backlog"
    create_topic(broker.bootstrap, topic, config=TIERED)
    produce_range(broker, topic, 0, 50)
    assert wait_until(lambda: all_rolled_remote(broker, store, topic), 30)
    copied_end = local_segment_bases(broker, topic)[-1] - 1

    store.pause()
    try:
        produce_range(broker, topic, 50, 40)
        time.sleep(1)  # a copy round takes the rolled segments and hangs
        produce_range(broker, topic, 90, 80)  # more roll while it hangs
        assert wait_until(lambda: any(log_events(broker, "remote_copy_backlog")), 30)
        first = next(log_events(broker, "remote_copy_backlog"))
        assert (first.level, first.fields["partition"]) == ("WARNING", f"{topic}-0")
        assert int(first.fields["backlog_bytes"]) == backlog_at(
            broker, topic, copied_end, first.time
        )
    finally:
        store.resume()
    assert wait_until(lambda: all_rolled_remote(broker, store, topic), 60)


def test_a_broker_stops_cleanly_and_promptly_while_the_store_is_paused(
    patient_broker: BrokerProcess, store: MotoServer
) -> None:
    broker, topic = patient_broker, "stopping"
    create_topic(broker.bootstrap, topic, config=TIERED)
    produce_range(broker, topic, 0, 100)
    assert wait_until(lambda: all_rolled_remote(broker, store, topic), 30)
    assert wait_until(lambda: local_segment_bases(broker, topic)[0] > 0, 30)
    store.pause()
    try:
        produce_range(broker, topic, 100, 50)  # a copy hangs on the store
        assert read(broker, topic, 0, 1, 3) == []  # and remote reads do
        began = time.monotonic()
        assert broker.stop(timeout=60) == 0
        took = time.monotonic() - began
    finally:
        store.resume()
    assert "event=broker_stopped" in broker.log_text()
    assert took < 15, f"the broker took {took:.1f}s to stop"


def list_offsets_request(topic: str, timestamp: int, timeout_ms: int) -> ListOffsetsRequest:
    """ListOffsets v10 of partition 0, remote lookups bounded by ``timeout_ms`` (KIP-1075)."""
    return ListOffsetsRequest(
        replica_id=BrokerId(-1),
        isolation_level=i8(0),
        topics=(
            ListOffsetsTopic(
                name=TopicName(topic),
                partitions=(
                    ListOffsetsPartition(partition_index=i32(0), timestamp=i64(timestamp)),
                ),
            ),
        ),
        timeout=i32Timedelta.parse(timedelta(milliseconds=timeout_ms)),
    )


def test_timed_out_remote_timestamp_lookups_stay_within_the_reader_bound(
    patient_broker: BrokerProcess, store: MotoServer
) -> None:
    """Each lookup that outlives its timeout still holds its reader thread: the pool's
    bound (remote.log.reader.threads 2 + max.pending.tasks 2) rejects what is beyond it,
    instead of queueing lookups without end behind a store that does not answer."""
    broker, topic = patient_broker, "lookups"
    create_topic(broker.bootstrap, topic, config=TIERED)
    produce_range(broker, topic, 0, 100)
    assert wait_until(lambda: all_rolled_remote(broker, store, topic), 30)
    assert wait_until(lambda: local_segment_bases(broker, topic)[0] > 0, 30)
    store.pause()
    try:
        errors = []
        with WireClient(broker.bootstrap, timeout=30) as client:
            for _ in range(8):
                response = client.request(list_offsets_request(topic, 0, 300))
                errors.append(response.topics[0].partitions[0].error_code)
    finally:
        store.resume()
    assert errors[:4] == [ErrorCode.request_timed_out] * 4
    assert ErrorCode.request_timed_out not in errors[4:], errors
