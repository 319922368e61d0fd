"""A steady stream of numbered records from an idempotent acks=all producer, and the
checks the fault tests make of what it acknowledged.

`SequenceProducer` runs librdkafka in a thread of its own, producing the values
``b"0"``, ``b"1"``, ... to one partition as fast as it is allowed to, and records for
each value whether and when the broker acknowledged it. A fault test breaks brokers
while it runs; afterwards `verify_sequence` reads the partition back and asserts the
guarantee an idempotent acks=all producer has with min.insync.replicas=2: every
acknowledged value is there exactly once, and values are in the order they were sent.
(Values the producer gave up on may or may not be there; they were never promised.)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CTopicPartition

# Enough in flight to keep a stream going, few enough that a fault loses little time.
_QUEUE_LIMIT: Final = 1000


@dataclass(slots=True)
class ProducerTally:
    """What the producer was told, per value. Written by the producer thread only."""

    # value -> offset; None for an implicit ack (see verify_sequence)
    acked: dict[int, int | None] = field(default_factory=dict)
    ack_times: dict[int, float] = field(default_factory=dict)  # value -> monotonic time
    failed: dict[int, str] = field(default_factory=dict)
    fatal: str | None = None


class SequenceProducer:
    """Produces numbered values until `stop`; `wait_for` returns once a condition on the
    tally holds. Not reusable after `stop`."""

    def __init__(self, bootstrap: str, topic: str, partition: int = 0, **config: Any) -> None:
        self.topic = topic
        self.partition = partition
        self.tally = ProducerTally()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sent = 0
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 120_000,
                "queue.buffering.max.messages": _QUEUE_LIMIT,
                "topic.metadata.refresh.interval.ms": 1000,
                "retry.backoff.ms": 100,
                "retry.backoff.max.ms": 500,
                **config,
            }
        )
        self._thread = threading.Thread(target=self._run, name="sequence-producer", daemon=True)

    def start(self) -> SequenceProducer:
        self._thread.start()
        return self

    @property
    def sent(self) -> int:
        return self._sent

    def acked_count(self) -> int:
        with self._lock:
            return len(self.tally.acked)

    def wait_for(self, condition: Callable[[ProducerTally], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                if condition(self.tally):
                    return
                if self.tally.fatal is not None:
                    raise AssertionError(f"producer failed fatally: {self.tally.fatal}")
            if time.monotonic() >= deadline:
                raise TimeoutError(f"producer condition not met within {timeout}s: {self.tally}")
            time.sleep(0.05)

    def wait_for_acks(self, count: int, timeout: float = 60.0) -> None:
        """Until ``count`` more values than now are acknowledged."""
        target = self.acked_count() + count
        self.wait_for(lambda t: len(t.acked) >= target, timeout)

    def stop(self, timeout: float = 120.0) -> ProducerTally:
        """Stop sending, wait for every outstanding value's outcome."""
        self._stop.set()
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "producer thread did not finish"
        return self.tally

    def _on_delivery(self, value: int) -> Callable[[Any, Any], None]:
        def report(err: Any, msg: Any) -> None:
            with self._lock:
                if err is None:
                    self.tally.acked[value] = msg.offset()
                    self.tally.ack_times[value] = time.monotonic()
                else:
                    self.tally.failed[value] = str(err)
                    if err.fatal():
                        self.tally.fatal = str(err)

        return report

    def _run(self) -> None:
        producer = self._producer
        while not self._stop.is_set():
            value = self._sent
            try:
                producer.produce(
                    self.topic,
                    str(value).encode(),
                    partition=self.partition,
                    on_delivery=self._on_delivery(value),
                )
            except BufferError:
                producer.poll(0.05)
                continue
            self._sent += 1
            producer.poll(0)
        remaining = producer.flush(110.0)
        assert remaining == 0, f"{remaining} values still undelivered"


def read_partition(
    bootstrap: str, topic: str, partition: int, end_offset: int, timeout: float = 60.0
) -> list[tuple[int, int]]:
    """(offset, value) of every record below ``end_offset``, read_committed off, from the
    beginning; fails on any consumer error."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "tiercel-fault-check",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    records: list[tuple[int, int]] = []
    try:
        consumer.assign([CTopicPartition(topic, partition, 0)])
        deadline = time.monotonic() + timeout
        while (not records or records[-1][0] < end_offset - 1) and end_offset > 0:
            assert time.monotonic() < deadline, (
                f"read {len(records)} records of {topic}-{partition}, "
                f"up to {records[-1][0] if records else None}, wanted up to {end_offset - 1}"
            )
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, str(error)
                continue
            offset, value = message.offset(), message.value()
            assert offset is not None and value is not None
            if offset < end_offset:
                records.append((offset, int(value)))
    finally:
        consumer.close()
    return records


def verify_sequence(records: list[tuple[int, int]], tally: ProducerTally) -> None:
    """Every acknowledged value present exactly once, at the offset it was acknowledged
    at; values in increasing order (the idempotent producer keeps order per partition).

    An idempotent librdkafka producer whose request failed with an uncertain outcome
    (a connection lost to a killed or paused leader) and whose next request succeeded
    acknowledges the first request's records without an offset: the broker accepted
    the later sequence, so it has them (librdkafka's rd_kafka_dr_implicit_ack). Such a
    value must be in the log; where is unknown to the producer."""
    values = [value for _, value in records]
    assert len(values) == len(set(values)), "duplicated values: " + repr(
        sorted({v for v in values if values.count(v) > 1})[:20]
    )
    assert values == sorted(values), "values out of order"
    at = dict((value, offset) for offset, value in records)
    lost = sorted(v for v in tally.acked if v not in at)
    assert not lost, f"{len(lost)} acknowledged values lost, first {lost[:20]}"
    moved = {v: (o, at[v]) for v, o in tally.acked.items() if o is not None and at[v] != o}
    assert not moved, f"acknowledged offsets differ from the log: {list(moved.items())[:10]}"
