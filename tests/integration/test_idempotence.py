"""The idempotent producer against a real broker process.

- librdkafka with enable.idempotence=true produces continuously while the broker is
  SIGKILLed and restarted: every message arrives exactly once, in order per partition
  (the batches in flight at the crash are retried and recognised as duplicates).
- A hand-built Produce request repeated with the same producer id, epoch and sequence is
  stored once and answered with its first offset, also after a crash; a sequence gap is
  OUT_OF_ORDER_SEQUENCE_NUMBER, an older epoch INVALID_PRODUCER_EPOCH.
- kafka-python's and aiokafka's producers with idempotence on work.
- InitProducerId never hands out an id twice, across clean and unclean restarts
  (transactional ids: tests/integration/test_transactions.py).
- DescribeProducers lists each partition's producers.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import aiokafka
import kafka
from confluent_kafka import Producer
from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v0.request import InitProducerIdRequest as InitV0
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest as InitV4
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.types import ProducerId, TopicName
from kio.static.primitive import Records, i16, i32, i32Timedelta

from support.broker import BrokerProcess
from support.clients import Outgoing, consume, create_topic, now_ms, produce, watermarks
from support.wire import WireClient
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch

PARTITIONS = 3


def init_producer_id(client: WireClient, transactional_id: str | None = None, **fields: Any) -> Any:
    return client.request(
        InitV4(
            transactional_id=transactional_id,
            transaction_timeout=i32Timedelta.parse(datetime.timedelta(seconds=60)),
            **fields,
        )
    )


def produce_batch(client: WireClient, topic: str, batch: bytes) -> Any:
    """One batch to partition 0, acks=all; the partition's response."""
    response = client.request(
        ProduceRequest(
            acks=i16(-1),
            timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
            topic_data=(
                TopicProduceData(
                    name=TopicName(topic),
                    partition_data=(PartitionProduceData(index=i32(0), records=Records(batch)),),
                ),
            ),
        )
    )
    return response.responses[0].partition_responses[0]


def idempotent_batch(producer_id: int, epoch: int, seq: int, count: int = 1) -> bytes:
    records = [
        SimpleRecord(b"k", b"p%d-e%d-s%d" % (producer_id, epoch, seq + i), timestamp=now_ms())
        for i in range(count)
    ]
    return build_record_batch(
        records, producer_id=producer_id, producer_epoch=epoch, base_sequence=seq
    )


# -- librdkafka across a crash ----------------------------------------------------------------


class ResponseEatingProxy:
    """A TCP proxy to the broker whose `freeze` drops the broker's responses while the
    requests still go through, so that batches the broker wrote go unacknowledged, as
    when a broker dies between writing and answering; `cut` closes every connection."""

    def __init__(self, target_port: int) -> None:
        self._target_port = target_port
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._server.getsockname()[1])
        self._frozen = threading.Event()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
                upstream = socket.create_connection(("127.0.0.1", self._target_port), 5)
            except OSError:
                if self._server.fileno() < 0:
                    return
                client.close()
                continue
            self._sockets += [client, upstream]
            for src, dst, replies in ((client, upstream, False), (upstream, client, True)):
                threading.Thread(target=self._pump, args=(src, dst, replies), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, replies: bool) -> None:
        try:
            while data := src.recv(65536):
                if not (replies and self._frozen.is_set()):
                    dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def freeze(self) -> None:
        self._frozen.set()

    def cut(self) -> None:
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        self._sockets.clear()
        self._frozen.clear()

    def close(self) -> None:
        self._server.close()
        self.cut()


class SequencedProducer:
    """An idempotent librdkafka producer writing ``<partition>-<n>`` values, n counting up
    per partition, from a thread until stopped; records delivery results."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.sent = [0] * PARTITIONS
        self.delivered = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "linger.ms": 2,
                "batch.num.messages": 100,
                "message.timeout.ms": 60_000,
                "retry.backoff.ms": 50,
                "reconnect.backoff.ms": 50,
                "reconnect.backoff.max.ms": 200,
            }
        )
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _on_delivery(self, err: Any, _msg: Any) -> None:
        if err is None:
            self.delivered += 1
        else:
            self.errors.append(str(err))

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            partition = n % PARTITIONS
            value = b"%d-%08d" % (partition, self.sent[partition])
            try:
                self._producer.produce(
                    self.topic, value, partition=partition, on_delivery=self._on_delivery
                )
            except BufferError:
                self._producer.poll(0.01)
                continue
            self.sent[partition] += 1
            n += 1
            if n % 10 == 0:
                self._producer.poll(0)
                time.sleep(0.001)  # a steady stream (some 10,000 a second), not a flood

    def start(self) -> None:
        self._thread.start()

    def wait_for(self, delivered: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.delivered < delivered and time.monotonic() < deadline:
            time.sleep(0.02)

    def finish(self, timeout: float) -> int:
        """Stop producing and wait for every message; the number still undelivered."""
        self._stop.set()
        self._thread.join(10)
        return int(self._producer.flush(timeout))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_librdkafka_delivers_exactly_once_in_order_across_a_crash(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker_port = _free_port()
    proxy = ResponseEatingProxy(broker_port)
    broker = broker_factory(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{broker_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}",
        }
    )
    broker.port = broker_port  # restarts bind the broker's port, not the advertised one
    topic = "exactly-once"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    bootstrap = f"127.0.0.1:{proxy.port}"  # what the broker advertises
    producer = SequencedProducer(bootstrap, topic)
    try:
        producer.start()
        producer.wait_for(5000, 20)
        # The broker keeps writing what arrives, its answers are lost, then it dies:
        # the batches in flight were written but never acknowledged.
        proxy.freeze()
        time.sleep(0.3)
        broker.kill()
        proxy.cut()
        before = producer.delivered
        broker.start()
        assert "clean_shutdown=False" in broker.tail()
        producer.wait_for(before + 3000, 20)
        assert producer.finish(60) == 0, "messages still undelivered"
        assert producer.errors == []
        total = sum(producer.sent)
        assert producer.delivered == total and total > 8000
        got = consume("confluent", bootstrap, topic, total, range(PARTITIONS), timeout=60)
    finally:
        proxy.close()
    for p, records in got.by_partition().items():
        expected = [b"%d-%08d" % (p, n) for n in range(producer.sent[p])]
        assert [r.value for r in records] == expected, f"partition {p}"
        assert [r.offset for r in records] == list(range(len(expected)))


# -- hand-built requests ----------------------------------------------------------------------


def test_a_repeated_batch_is_stored_once_and_answered_with_its_offset(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory()
    topic = "wire-idempotence"
    create_topic(broker.bootstrap, topic, 1)
    with WireClient(broker.bootstrap) as client:
        init = init_producer_id(client)
        assert init.error_code == ErrorCode.none and init.producer_epoch == 0
        pid = init.producer_id
        first = produce_batch(client, topic, idempotent_batch(pid, 0, 0, 3))
        assert (first.error_code, first.base_offset) == (ErrorCode.none, 0)
        plain = produce_batch(client, topic, build_record_batch([SimpleRecord(b"x", b"plain")]))
        assert plain.base_offset == 3
        again = produce_batch(client, topic, idempotent_batch(pid, 0, 0, 3))
        assert (again.error_code, again.base_offset) == (ErrorCode.none, 0)

        gap = produce_batch(client, topic, idempotent_batch(pid, 0, 4))
        assert gap.error_code == ErrorCode.out_of_order_sequence_number
        assert gap.base_offset == -1
        following = produce_batch(client, topic, idempotent_batch(pid, 0, 3))
        assert (following.error_code, following.base_offset) == (ErrorCode.none, 4)

        bumped = produce_batch(client, topic, idempotent_batch(pid, 1, 0))
        assert (bumped.error_code, bumped.base_offset) == (ErrorCode.none, 5)
        stale = produce_batch(client, topic, idempotent_batch(pid, 0, 4))
        assert stale.error_code == ErrorCode.invalid_producer_epoch

        described = client.request(
            DescribeProducersRequest(
                topics=(TopicRequest(name=TopicName(topic), partition_indexes=(i32(0), i32(7))),)
            )
        )
        partitions = described.topics[0].partitions
        (state,) = partitions[0].active_producers
        assert (state.producer_id, state.producer_epoch, state.last_sequence) == (pid, 1, 0)
        assert partitions[1].error_code == ErrorCode.unknown_topic_or_partition

    assert watermarks(broker.bootstrap, topic) == (0, 6)
    values = consume("kafka-python", broker.bootstrap, topic, 6).values()
    assert values == [
        b"p%d-e0-s0" % pid,
        b"p%d-e0-s1" % pid,
        b"p%d-e0-s2" % pid,
        b"plain",
        b"p%d-e0-s3" % pid,
        b"p%d-e1-s0" % pid,
    ]


def test_a_batch_retried_after_a_crash_is_still_a_duplicate(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory({"log.segment.bytes": 1024})
    topic = "wire-crash"
    create_topic(broker.bootstrap, topic, 1)
    with WireClient(broker.bootstrap) as client:
        pid = init_producer_id(client).producer_id
        offsets = [
            produce_batch(client, topic, idempotent_batch(pid, 0, seq, 4)).base_offset
            for seq in range(0, 80, 4)
        ]
    broker.kill()
    broker.start()
    with WireClient(broker.bootstrap) as client:
        for i, seq in enumerate(range(64, 80, 4), start=16):
            again = produce_batch(client, topic, idempotent_batch(pid, 0, seq, 4))
            assert (again.error_code, again.base_offset) == (ErrorCode.none, offsets[i])
        nxt = produce_batch(client, topic, idempotent_batch(pid, 0, 80))
        assert (nxt.error_code, nxt.base_offset) == (ErrorCode.none, 80)
    assert watermarks(broker.bootstrap, topic) == (0, 81)
    assert len(list((broker.log_dir / f"{topic}-0").glob("*.snapshot"))) > 1


def test_init_producer_id_answers_every_case(broker_factory: Callable[..., BrokerProcess]) -> None:
    broker = broker_factory()
    with WireClient(broker.bootstrap) as client:
        empty = init_producer_id(client, "")
        assert empty.error_code == ErrorCode.invalid_request
        half = init_producer_id(client, producer_id=ProducerId(5))
        assert half.error_code == ErrorCode.invalid_request
        # An idempotent producer's KIP-360 request: a fresh id at epoch 0, as Kafka.
        first = init_producer_id(client, producer_id=ProducerId(5), producer_epoch=i16(3))
        old = client.request(
            InitV0(
                transactional_id=None,
                transaction_timeout=i32Timedelta.parse(datetime.timedelta(seconds=1)),
            )
        )
        assert (first.error_code, old.error_code) == (ErrorCode.none, ErrorCode.none)
        assert (first.producer_epoch, old.producer_epoch) == (0, 0)
        assert old.producer_id == first.producer_id + 1


def test_producer_ids_are_never_reused_across_restarts(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory()
    seen: list[int] = []

    def take(count: int) -> None:
        with WireClient(broker.bootstrap) as client:
            for _ in range(count):
                response = init_producer_id(client)
                assert response.error_code == ErrorCode.none
                seen.append(response.producer_id)

    take(3)
    assert broker.stop() == 0
    broker.start()
    take(2)
    broker.kill()
    broker.start()
    take(2)
    assert seen == [0, 1, 2, 1000, 1001, 2000, 2001]


# -- Python clients with idempotence on ---------------------------------------------------------


def test_kafka_python_default_producer_works(broker_factory: Callable[..., BrokerProcess]) -> None:
    broker = broker_factory()
    topic = "kafka-python-default"
    create_topic(broker.bootstrap, topic, 2)
    producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap)  # idempotent by default
    try:
        futures = [producer.send(topic, b"v%d" % i, partition=i % 2) for i in range(200)]
        producer.flush(30)
        offsets = [f.get(10).offset for f in futures]
    finally:
        producer.close(10)
    assert offsets == [i // 2 for i in range(200)]
    got = consume("confluent", broker.bootstrap, topic, 200, (0, 1))
    assert sorted(got.values()) == sorted(b"v%d" % i for i in range(200))


def test_aiokafka_idempotent_producer_works(broker_factory: Callable[..., BrokerProcess]) -> None:
    broker = broker_factory()
    topic = "aiokafka-idempotent"
    create_topic(broker.bootstrap, topic, 1)

    async def run() -> list[int]:
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap, enable_idempotence=True
        )
        await producer.start()
        try:
            sent = [await producer.send(topic, b"a%d" % i, partition=0) for i in range(50)]
            return [(await f).offset for f in sent]
        finally:
            await producer.stop()

    assert asyncio.run(run()) == list(range(50))
    delivered = produce("confluent", broker.bootstrap, topic, [Outgoing(0, b"after")])
    assert delivered[0].offset == 50
