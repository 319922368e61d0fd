"""An exactly-once consume-transform-produce loop with confluent-kafka (librdkafka), as
applications write it (Kafka's examples/ExactlyOnceMessageProcessor, librdkafka's
examples/transactions.c, confluent-kafka-python's eos-transactions.py):

a read_committed consumer in a group without auto-commit; a transactional producer;
per batch of consumed records, begin a transaction, produce each transformed record,
``send_offsets_to_transaction`` with the consumer's positions and group metadata, and
commit. librdkafka classifies every failure: a retriable one (a timeout, a coordinator
moving) is retried by calling the same operation again; one that requires an abort is
answered with ``abort_transaction`` and a rewind of the consumer to the group's
committed offsets, so the batch is processed again; a fatal one ends the loop.

Every call is bounded by the loop's deadline; the loop runs in a thread of its own so
that a call librdkafka never returns from fails the test instead of hanging it. What
happened (transactions, aborts, each error, the slowest transaction, the call under
way) is kept for the test's failure message; librdkafka's own debug lines (``eos``)
go to stderr, which pytest shows with a failure.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as CTopicPartition

# One librdkafka call may wait this long before the loop asks it again.
_OPERATION_TIMEOUT_S: Final = 10.0
# librdkafka's coordinator requests (TxnOffsetCommit's lookup of the group coordinator)
# wait for a cached coordinator that is down until some broker connection goes up or
# down, with no timeout of their own (librdkafka issues #5456 and #5511, open in 2.16):
# when the SIGKILLed group coordinator's connection is already down as
# send_offsets_to_transaction starts, and the broker then leaves the metadata, nothing
# wakes the lookup and the call blocks past its timeout, forever. Closing idle
# connections after a second makes such transitions happen while the producer waits;
# each re-runs the lookup, which asks FindCoordinator again (at most once a second).
_PRODUCER_IDLE_CONNECTION_MS: Final = 1000


class LoopDeadline(AssertionError):
    """The loop did not finish in time; the message says how far it got."""


@dataclass(slots=True)
class LoopReport:
    """What the loop did, for a failure message."""

    commits: int = 0
    aborts: int = 0
    records_committed: int = 0
    errors: list[str] = field(default_factory=list)
    # (duration s, monotonic start) of the slowest committed transaction
    slowest: tuple[float, float] = (0.0, 0.0)
    # the librdkafka call under way and since when (monotonic), None between calls
    calling: tuple[str, float] | None = None

    def error(self, where: str, error: KafkaError | str) -> None:
        self.errors.append(f"{time.monotonic():.1f} {where}: {error}")

    def summary(self) -> str:
        return (
            f"{self.commits} commits ({self.records_committed} records), {self.aborts} aborts, "
            f"slowest transaction {self.slowest[0]:.1f}s at {self.slowest[1]:.1f}; errors:\n"
            + "\n".join(self.errors[-40:])
        )


class ExactlyOnceLoop:
    """Reads ``input_topic`` in group ``group_id`` and writes ``transform(key, value)``
    for each record to ``output_topic`` under ``transactional_id``, with the input
    record's key. Not thread-safe."""

    def __init__(
        self,
        bootstrap: str,
        input_topic: str,
        output_topic: str,
        group_id: str,
        transactional_id: str,
        transform: Callable[[bytes], bytes],
        batch_size: int = 100,
        debug: str = "eos",
        producer_config: Mapping[str, object] | None = None,
    ) -> None:
        self.report = LoopReport()
        self._output_topic = output_topic
        self._transform = transform
        self._batch_size = batch_size
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group_id,
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
            }
        )
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "transactional.id": transactional_id,
                "linger.ms": 5,
                # Longer than a failover takes (the 9 s broker session timeout, the
                # election, the coordinators' loads), shorter than the test's budget:
                # a transaction the coordinator had to abort on timeout shows as an
                # abort in the report.
                "transaction.timeout.ms": 30000,
                "connections.max.idle.ms": _PRODUCER_IDLE_CONNECTION_MS,
                # librdkafka's debug lines go to stderr, which pytest shows for a
                # failed test: what the transaction manager did up to the failure.
                "debug": debug,
                **(producer_config or {}),
            }
        )
        self.consumer.subscribe([input_topic])
        # The positions of the last committed transaction, per input partition.
        self.committed: dict[int, int] = {}

    def init(self, deadline: float) -> None:
        self._retrying("init_transactions", deadline, self.producer.init_transactions)

    def close(self) -> None:
        self.consumer.close()
        self.producer.flush(1)

    def run(
        self,
        done: Callable[[Mapping[int, int]], bool],
        deadline: float,
        inside: Callable[[], None],
        grace_s: float = 15.0,
    ) -> None:
        """`run_until` in a thread of its own, so that a librdkafka call blocking past
        its timeout fails the test (`LoopDeadline` naming the call) rather than hangs
        it; the blocked thread is left behind (a daemon) as nothing can interrupt it."""
        failure: list[BaseException] = []

        def target() -> None:
            try:
                self.run_until(done, deadline, inside)
            except BaseException as e:  # re-raised by the test thread
                failure.append(e)

        worker = threading.Thread(target=target, name="exactly-once-loop", daemon=True)
        worker.start()
        worker.join(max(deadline - time.monotonic(), 0) + grace_s)
        if worker.is_alive():
            what, since = self.report.calling or ("?", time.monotonic())
            raise LoopDeadline(
                f"{what} has not returned for {time.monotonic() - since:.0f}s; "
                f"committed positions {self.committed}; {self.report.summary()}"
            )
        if failure:
            raise failure[0]

    def run_until(
        self, done: Callable[[Mapping[int, int]], bool], deadline: float, inside: Callable[[], None]
    ) -> None:
        """Process batches until ``done(committed positions)``; ``inside`` runs in every
        transaction once its records are handed to the producer, before its offsets are
        sent (where a test injects its faults: the records are in flight, the
        transaction is open). Raises `LoopDeadline` at ``deadline``."""
        while not done(self.committed):
            if time.monotonic() >= deadline:
                raise LoopDeadline(f"committed positions {self.committed}; {self.report.summary()}")
            self.process_batch(deadline, inside)

    def process_batch(self, deadline: float, inside: Callable[[], None]) -> None:
        messages = []
        for message in self.consumer.consume(self._batch_size, 0.5):
            if message.error() is not None:
                self.report.error("consume", message.error())
            else:
                messages.append(message)
        if not messages:
            return
        started = time.monotonic()
        self.producer.begin_transaction()
        try:
            for message in messages:
                self._produce(message.key(), self._transform(message.value()))
            inside()
            positions = self.consumer.position(self.consumer.assignment())
            metadata = self.consumer.consumer_group_metadata()
            self._retrying(
                "send_offsets_to_transaction",
                deadline,
                lambda timeout: self.producer.send_offsets_to_transaction(
                    positions, metadata, timeout
                ),
            )
            self._retrying("commit_transaction", deadline, self.producer.commit_transaction)
        except _AbortRequired as e:
            self.report.error("abort", e.error)
            self._abort_and_rewind(deadline)
            return
        took = time.monotonic() - started
        if took > self.report.slowest[0]:
            self.report.slowest = (took, started)
        self.report.commits += 1
        self.report.records_committed += len(messages)
        for tp in positions:
            if tp.offset >= 0:
                self.committed[tp.partition] = tp.offset

    def _produce(self, key: bytes, value: bytes) -> None:
        while True:
            try:
                self.producer.produce(self._output_topic, value, key)
                return
            except BufferError:
                self.producer.poll(0.1)
            except KafkaException as e:
                # A transaction already in an abortable state refuses new records.
                raise _AbortRequired(e.args[0]) from e

    def _retrying(self, what: str, deadline: float, call: Callable[[float], Any]) -> None:
        """``call(timeout)`` until it succeeds; a retriable error is retried, one that
        requires an abort raises `_AbortRequired`, a fatal one is raised as it is."""
        while True:
            timeout = min(_OPERATION_TIMEOUT_S, max(deadline - time.monotonic(), 0.1))
            self.report.calling = (what, time.monotonic())
            try:
                call(timeout)
                return
            except KafkaException as e:
                error: KafkaError = e.args[0]
                self.report.error(what, error)
                if error.fatal():
                    raise
                if error.txn_requires_abort():
                    raise _AbortRequired(error) from e
                if not error.retriable() or time.monotonic() >= deadline:
                    raise
            finally:
                self.report.calling = None

    def _abort_and_rewind(self, deadline: float) -> None:
        self._retrying("abort_transaction", deadline, self.producer.abort_transaction)
        self.report.aborts += 1
        while True:
            assignment = self.consumer.assignment()
            try:
                committed = self.consumer.committed(
                    assignment, timeout=min(_OPERATION_TIMEOUT_S, deadline - time.monotonic())
                )
                break
            except KafkaException as e:
                self.report.error("committed", e.args[0])
                if time.monotonic() >= deadline:
                    raise
        for tp in committed:
            offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
            self.consumer.seek(CTopicPartition(tp.topic, tp.partition, offset))


class _AbortRequired(Exception):
    def __init__(self, error: KafkaError) -> None:
        super().__init__(str(error))
        self.error = error
