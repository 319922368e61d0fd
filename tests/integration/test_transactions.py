"""The transaction coordinator against a real broker process, with confluent-kafka's
transactional producer (librdkafka):

- init_transactions, begin, produce to several partitions, commit: a read_committed
  consumer sees every record; abort: it sees none (read_uncommitted sees both);
  DescribeTransactions and ListTransactions show the id;
- zombie fencing: a second producer with the same transactional.id fences the first,
  whose commit then fails fatally, and whose open transaction is aborted;
- a transaction left open past its transaction.timeout.ms is aborted by the
  coordinator with an epoch bump: its records never become visible, and its producer
  is fenced;
- send_offsets_to_transaction: a consumer group's offsets committed inside a
  transaction become the group's offsets when it commits, never when it aborts, and
  survive a broker restart (the marker is replayed from __consumer_offsets);
- aiokafka's and kafka-python's transactional producers (older request versions:
  AddPartitionsToTxn v0-3, EndTxn v0-3, TxnOffsetCommit v0-3) commit and abort too;
- InitProducerId's refusals: a timeout above transaction.max.timeout.ms, an unknown id
  in AddPartitionsToTxn / EndTxn;
- a fenced producer on request versions older than PRODUCER_FENCED gets
  INVALID_PRODUCER_EPOCH.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiokafka
import kafka
import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from kio.schema.errors import ErrorCode
from kio.serial.errors import OutOfBoundValue

from support.broker import BrokerProcess
from support.clients import create_topic, running_broker, wait_until
from support.wire import WireClient
from tiercel.protocol.entities import build_entity, request_class

PARTITIONS = 3


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = {
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": 300,
        "transaction.max.timeout.ms": 120000,
    }
    with running_broker(Path(tmp_path_factory.mktemp("txns")), overrides) as broker:
        yield broker


def request(bootstrap: str, api_key: int, version: int, values: dict[str, Any]) -> Any:
    with WireClient(bootstrap) as client:
        return client.request(
            build_entity(request_class(api_key, version), values, fill_missing=True)
        )


def producer(bootstrap: str, transactional_id: str, **extra: Any) -> Producer:
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "linger.ms": 5,
            **extra,
        }
    )
    p.init_transactions(20)
    return p


def consume_all(bootstrap: str, topic: str, isolation: str, expect: int) -> list[bytes]:
    """Every record of ``topic`` readable at ``isolation``: read until ``expect`` arrived
    (or 15 s passed), then a second more to catch extras."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{isolation}-{topic}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "fetch.wait.max.ms": 100,
        }
    )
    values: list[bytes] = []
    try:
        consumer.assign([CTopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 15
        settle: float | None = None
        while time.monotonic() < deadline and (settle is None or time.monotonic() < settle):
            for msg in consumer.consume(100, 0.2):
                if msg.error() is None:
                    values.append(msg.value())
            if settle is None and len(values) >= expect:
                settle = time.monotonic() + 1.0
    finally:
        consumer.close()
    return sorted(values)


def describe(bootstrap: str, transactional_id: str) -> Any:
    """DescribeTransactions, sent to the coordinator (the only broker); None while it
    answers an error (loading, say), or a start time of -1 (an id with no transaction
    started yet), which kio cannot decode."""
    try:
        response = request(bootstrap, 65, 0, {"transactional_ids": [transactional_id]})
    except OutOfBoundValue:
        return None
    state = response.transaction_states[0]
    return state if state.error_code == ErrorCode.none else None


def state_of(bootstrap: str, transactional_id: str) -> str | None:
    described = describe(bootstrap, transactional_id)
    return None if described is None else str(described.transaction_state)


def test_commit_and_abort_across_partitions(broker: BrokerProcess) -> None:
    topic = "orders"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    p = producer(broker.bootstrap, "committer")
    p.begin_transaction()
    for i in range(30):
        p.produce(topic, f"c{i:02}".encode(), partition=i % PARTITIONS)
    p.commit_transaction(20)
    p.begin_transaction()
    for i in range(30):
        p.produce(topic, f"a{i:02}".encode(), partition=i % PARTITIONS)
    p.flush(10)
    p.abort_transaction(20)
    # A second committed transaction after the abort: the id keeps working.
    p.begin_transaction()
    p.produce(topic, b"last", partition=0)
    p.commit_transaction(20)

    committed = consume_all(broker.bootstrap, topic, "read_committed", 31)
    assert committed == sorted([f"c{i:02}".encode() for i in range(30)] + [b"last"])
    everything = consume_all(broker.bootstrap, topic, "read_uncommitted", 61)
    assert len(everything) == 61

    assert wait_until(lambda: state_of(broker.bootstrap, "committer") == "CompleteCommit", 10)
    state = describe(broker.bootstrap, "committer")
    assert state.error_code == ErrorCode.none
    assert state.topics == ()
    listed = request(
        broker.bootstrap,
        66,
        1,
        {
            "state_filters": ["CompleteCommit", "Bogus"],
            "producer_id_filters": [],
            "duration_filter": -1,
        },
    )
    assert listed.error_code == ErrorCode.none
    assert "committer" in {s.transactional_id for s in listed.transaction_states}
    assert listed.unknown_state_filters == ("Bogus",)
    unknown = request(broker.bootstrap, 65, 0, {"transactional_ids": ["never-used"]})
    assert unknown.transaction_states[0].error_code == ErrorCode.transactional_id_not_found


def test_a_second_producer_fences_the_first(broker: BrokerProcess) -> None:
    topic = "fenced"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    zombie = producer(broker.bootstrap, "shared-id")
    zombie.begin_transaction()
    zombie.produce(topic, b"zombie", partition=0)
    zombie.flush(10)
    # The new instance's InitProducerId aborts the zombie's open transaction first.
    successor = producer(broker.bootstrap, "shared-id")
    successor.begin_transaction()
    successor.produce(topic, b"successor", partition=1)
    successor.commit_transaction(20)
    with pytest.raises(KafkaException) as failure:
        zombie.produce(topic, b"late", partition=2)
        zombie.commit_transaction(10)
    error = failure.value.args[0]
    assert error.fatal() or error.txn_requires_abort(), error
    assert consume_all(broker.bootstrap, topic, "read_committed", 1) == [b"successor"]


def test_a_transaction_past_its_timeout_is_aborted(broker: BrokerProcess) -> None:
    topic = "slow"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    slow = producer(broker.bootstrap, "slowpoke", **{"transaction.timeout.ms": 2000})
    slow.begin_transaction()
    slow.produce(topic, b"too-late", partition=0)
    slow.flush(10)
    epoch_before = describe(broker.bootstrap, "slowpoke").producer_epoch
    assert wait_until(lambda: state_of(broker.bootstrap, "slowpoke") == "CompleteAbort", 15)
    assert describe(broker.bootstrap, "slowpoke").producer_epoch == epoch_before + 1
    with pytest.raises(KafkaException):
        slow.commit_transaction(10)
    assert consume_all(broker.bootstrap, topic, "read_committed", 0) == []
    assert consume_all(broker.bootstrap, topic, "read_uncommitted", 1) == [b"too-late"]
    assert "event=timed_out_transaction_aborted" in broker.log_text()


def test_the_coordinators_refusals(broker: BrokerProcess) -> None:
    too_long = request(
        broker.bootstrap,
        22,
        4,
        {
            "transactional_id": "t",
            "transaction_timeout": 10**6,
            "producer_id": -1,
            "producer_epoch": -1,
        },
    )
    assert too_long.error_code == ErrorCode.invalid_transaction_timeout
    end = request(
        broker.bootstrap,
        26,
        3,
        {"transactional_id": "nobody", "producer_id": 7, "producer_epoch": 0, "committed": True},
    )
    assert end.error_code in (ErrorCode.invalid_producer_id_mapping, ErrorCode.not_coordinator)


def test_state_survives_a_crash_and_is_reloaded(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    """SIGKILL, restart: leading __transaction_state again replays it; the id keeps its
    producer id, and a new producer instance gets the next epoch."""
    crashed = broker_factory()
    create_topic(crashed.bootstrap, "durable", PARTITIONS)
    p = producer(crashed.bootstrap, "durable-id")
    p.begin_transaction()
    p.produce("durable", b"kept", partition=2)
    p.commit_transaction(20)
    before = describe(crashed.bootstrap, "durable-id")
    assert wait_until(lambda: state_of(crashed.bootstrap, "durable-id") == "CompleteCommit", 10)
    crashed.kill()
    crashed.start()
    assert wait_until(lambda: describe(crashed.bootstrap, "durable-id") is not None, 15)
    after = describe(crashed.bootstrap, "durable-id")
    assert (after.transaction_state, after.producer_id, after.producer_epoch) == (
        "CompleteCommit",
        before.producer_id,
        before.producer_epoch,
    )
    again = producer(crashed.bootstrap, "durable-id")
    again.begin_transaction()
    again.produce("durable", b"again", partition=0)
    again.commit_transaction(20)
    assert describe(crashed.bootstrap, "durable-id").producer_epoch == before.producer_epoch + 1
    assert consume_all(crashed.bootstrap, "durable", "read_committed", 2) == [b"again", b"kept"]
    assert "event=transaction_partition_loaded" in crashed.log_text()


def committed_offsets(bootstrap: str, group: str, topic: str) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = [CTopicPartition(topic, p) for p in range(PARTITIONS)]
        return [tp.offset for tp in consumer.committed(tps, timeout=10)]
    finally:
        consumer.close()


def test_offsets_sent_to_a_transaction_count_only_when_it_commits(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    server = broker_factory()
    create_topic(server.bootstrap, "input", PARTITIONS)
    create_topic(server.bootstrap, "output", PARTITIONS)
    source = Producer({"bootstrap.servers": server.bootstrap})
    for i in range(12):
        source.produce("input", f"in{i}".encode(), partition=i % PARTITIONS)
    source.flush(10)
    consumer = Consumer(
        {
            "bootstrap.servers": server.bootstrap,
            "group.id": "eos",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([CTopicPartition("input", p, 0) for p in range(PARTITIONS)])
    seen: list[Any] = []
    deadline = time.monotonic() + 15
    while len(seen) < 12 and time.monotonic() < deadline:
        seen += [m for m in consumer.consume(12, 0.5) if m.error() is None]
    assert len(seen) == 12
    p = producer(server.bootstrap, "eos-app")
    positions = consumer.position([CTopicPartition("input", i) for i in range(PARTITIONS)])
    # An aborted transaction's offsets never count.
    p.begin_transaction()
    p.produce("output", b"dropped", partition=0)
    p.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 10)
    p.abort_transaction(20)
    # Once the abort's markers are all written (CompleteAbort), the offsets are gone.
    assert wait_until(lambda: state_of(server.bootstrap, "eos-app") == "CompleteAbort", 10)
    assert committed_offsets(server.bootstrap, "eos", "input") == [-1001] * PARTITIONS
    p.begin_transaction()
    for m in seen:
        p.produce("output", m.value().replace(b"in", b"out"), partition=m.partition())
    p.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 10)
    p.commit_transaction(20)
    consumer.close()
    assert wait_until(
        lambda: committed_offsets(server.bootstrap, "eos", "input") == [4] * PARTITIONS, 10
    )
    outputs = consume_all(server.bootstrap, "output", "read_committed", 12)
    assert outputs == sorted(f"out{i}".encode() for i in range(12))
    server.kill()
    server.start()
    assert wait_until(
        lambda: committed_offsets(server.bootstrap, "eos", "input") == [4] * PARTITIONS, 20
    )


def _init(
    bootstrap: str, transactional_id: str, producer_id: int = -1, epoch: int = -1, version: int = 4
) -> Any:
    """InitProducerId (v4 unless told), retried while the coordinator loads."""
    values = {
        "transactional_id": transactional_id,
        "transaction_timeout": 60000,
        "producer_id": producer_id,
        "producer_epoch": epoch,
    }
    for _ in range(100):
        response = request(bootstrap, 22, version, values)
        if response.error_code not in (
            ErrorCode.coordinator_load_in_progress,
            ErrorCode.not_coordinator,
            ErrorCode.concurrent_transactions,
        ):
            return response
        time.sleep(0.1)
    raise AssertionError(f"InitProducerId kept failing: {response.error_code}")


def _add(
    bootstrap: str, tid: str, pid: int, epoch: int, topic: str, *parts: int, version: int = 3
) -> ErrorCode:
    response = request(
        bootstrap,
        24,
        version,
        {
            "v3_and_below_transactional_id": tid,
            "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": topic, "partitions": list(parts)}],
        },
    )
    codes = {p.partition_error_code for t in response.results_by_topic_v3_and_below
             for p in t.results_by_partition}  # fmt: skip
    assert len(codes) == 1, codes
    return ErrorCode(codes.pop())


def _end(
    bootstrap: str, tid: str, pid: int, epoch: int, commit: bool, version: int = 3
) -> ErrorCode:
    response = request(
        bootstrap,
        26,
        version,
        {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "committed": commit},
    )
    return ErrorCode(response.error_code)


def test_the_wire_protocol_errors_clients_rely_on(broker: BrokerProcess) -> None:
    bootstrap = broker.bootstrap
    create_topic(bootstrap, "wire", PARTITIONS)
    request(bootstrap, 10, 3, {"key": "wire-id", "key_type": 1})  # creates the topic
    first = _init(bootstrap, "wire-id")
    assert first.error_code == ErrorCode.none and first.producer_epoch == 0
    pid = first.producer_id
    # Nothing is open yet.
    assert _end(bootstrap, "wire-id", pid, 0, True) == ErrorCode.invalid_txn_state
    assert _add(bootstrap, "wire-id", pid + 1, 0, "wire", 0) == (
        ErrorCode.invalid_producer_id_mapping
    )
    assert _add(bootstrap, "wire-id", pid, 1, "wire", 0) == ErrorCode.producer_fenced
    assert _add(bootstrap, "unknown-id", pid, 0, "wire", 0) == (
        ErrorCode.invalid_producer_id_mapping
    )
    assert _add(bootstrap, "wire-id", pid, 0, "wire", 0, 1) == ErrorCode.none
    # KIP-890 part 1: a partition leader asks whether a partition is in the transaction.
    verify = request(
        bootstrap,
        24,
        4,
        {
            "transactions": [
                {
                    "transactional_id": "wire-id",
                    "producer_id": pid,
                    "producer_epoch": 0,
                    "verify_only": True,
                    "topics": [{"name": "wire", "partitions": [0, 2]}],
                }
            ]
        },
    )
    answers = {
        p.partition_index: p.partition_error_code
        for p in verify.results_by_transaction[0].topic_results[0].results_by_partition
    }
    assert answers == {0: ErrorCode.none, 2: ErrorCode.invalid_txn_state}
    missing = request(
        bootstrap,
        24,
        3,
        {
            "v3_and_below_transactional_id": "wire-id",
            "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": 0,
            "v3_and_below_topics": [
                {"name": "wire", "partitions": [0]},
                {"name": "no-such-topic", "partitions": [0]},
            ],
        },
    )
    codes = {(t.name, p.partition_error_code) for t in missing.results_by_topic_v3_and_below
             for p in t.results_by_partition}  # fmt: skip
    assert codes == {
        ("wire", ErrorCode.operation_not_attempted),
        ("no-such-topic", ErrorCode.unknown_topic_or_partition),
    }
    ongoing = request(
        bootstrap,
        66,
        1,
        {"state_filters": ["Ongoing"], "producer_id_filters": [pid], "duration_filter": -1},
    )
    assert [s.transactional_id for s in ongoing.transaction_states] == ["wire-id"]
    assert _end(bootstrap, "wire-id", pid, 1, True) == ErrorCode.producer_fenced
    assert _end(bootstrap, "wire-id", pid, 0, True) == ErrorCode.none
    assert wait_until(lambda: state_of(bootstrap, "wire-id") == "CompleteCommit", 10)
    # A retried commit is answered again; an abort of it is not.
    assert _end(bootstrap, "wire-id", pid, 0, True) == ErrorCode.none
    assert _end(bootstrap, "wire-id", pid, 0, False) == ErrorCode.invalid_txn_state
    # KIP-360: the producer that holds (pid, 0) bumps its epoch; its retry gets the same
    # answer; a stale epoch is fenced.
    bumped = _init(bootstrap, "wire-id", pid, 0)
    assert (bumped.error_code, bumped.producer_id, bumped.producer_epoch) == (
        ErrorCode.none,
        pid,
        1,
    )
    again = _init(bootstrap, "wire-id", pid, 0)
    assert (again.error_code, again.producer_epoch) == (ErrorCode.none, 1)
    stale = _init(bootstrap, "wire-id", pid, 7)
    assert stale.error_code == ErrorCode.producer_fenced
    # A new instance (no id) fences everyone: epoch 2.
    assert _init(bootstrap, "wire-id").producer_epoch == 2
    assert _add(bootstrap, "wire-id", pid, 1, "wire", 0) == ErrorCode.producer_fenced


def test_old_request_versions_get_invalid_producer_epoch_for_a_fenced_producer(
    broker: BrokerProcess,
) -> None:
    """PRODUCER_FENCED (KIP-588) is unknown to clients of InitProducerId v0-3 and of
    AddPartitionsToTxn, AddOffsetsToTxn and EndTxn v0-1: they get INVALID_PRODUCER_EPOCH,
    as from Kafka's KafkaApis."""
    bootstrap = broker.bootstrap
    create_topic(bootstrap, "old-clients", 1)
    request(bootstrap, 10, 3, {"key": "old-client-id", "key_type": 1})
    zombie = _init(bootstrap, "old-client-id")
    pid, stale = zombie.producer_id, zombie.producer_epoch
    assert _init(bootstrap, "old-client-id").producer_epoch == stale + 1  # a new instance

    def add_offsets(version: int) -> ErrorCode:
        values = {
            "transactional_id": "old-client-id",
            "producer_id": pid,
            "producer_epoch": stale,
            "group_id": "old-clients-group",
        }
        return ErrorCode(request(bootstrap, 25, version, values).error_code)

    for old, new in ((1, 2), (0, 3)):
        assert _add(bootstrap, "old-client-id", pid, stale, "old-clients", 0, version=old) == (
            ErrorCode.invalid_producer_epoch
        )
        assert _add(bootstrap, "old-client-id", pid, stale, "old-clients", 0, version=new) == (
            ErrorCode.producer_fenced
        )
        assert add_offsets(old) == ErrorCode.invalid_producer_epoch
        assert add_offsets(new) == ErrorCode.producer_fenced
        assert _end(bootstrap, "old-client-id", pid, stale, True, version=old) == (
            ErrorCode.invalid_producer_epoch
        )
        assert _end(bootstrap, "old-client-id", pid, stale, True, version=new) == (
            ErrorCode.producer_fenced
        )
    # KIP-360's InitProducerId with a stale epoch: v3 predates PRODUCER_FENCED, v4 has it.
    assert _init(bootstrap, "old-client-id", pid, 7, version=3).error_code == (
        ErrorCode.invalid_producer_epoch
    )
    assert _init(bootstrap, "old-client-id", pid, 7, version=4).error_code == (
        ErrorCode.producer_fenced
    )


async def _aiokafka_transactions(bootstrap: str, topic: str) -> None:
    producer = aiokafka.AIOKafkaProducer(
        bootstrap_servers=bootstrap, transactional_id="aiokafka-app", enable_idempotence=True
    )
    await producer.start()
    try:
        async with producer.transaction():
            for i in range(6):
                await producer.send(topic, f"aio-c{i}".encode(), partition=i % PARTITIONS)
        await producer.begin_transaction()
        await producer.send_and_wait(topic, b"aio-aborted", partition=0)
        await producer.abort_transaction()
        async with producer.transaction():
            await producer.send_offsets_to_transaction(
                {aiokafka.TopicPartition(topic, 0): 3}, "aio-group"
            )
    finally:
        await producer.stop()


def test_aiokafka_and_kafka_python_transactional_producers(broker: BrokerProcess) -> None:
    topic = "other-clients"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    asyncio.run(_aiokafka_transactions(broker.bootstrap, topic))
    producer = kafka.KafkaProducer(
        bootstrap_servers=broker.bootstrap, transactional_id="kafka-python-app"
    )
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(6):
        producer.send(topic, f"kp-c{i}".encode(), partition=i % PARTITIONS)
    producer.commit_transaction()
    producer.begin_transaction()
    producer.send(topic, b"kp-aborted", partition=1).get(10)
    producer.abort_transaction()
    producer.close()
    expected = sorted([f"aio-c{i}".encode() for i in range(6)] +
                      [f"kp-c{i}".encode() for i in range(6)])  # fmt: skip
    assert consume_all(broker.bootstrap, topic, "read_committed", 12) == expected
    assert len(consume_all(broker.bootstrap, topic, "read_uncommitted", 14)) == 14
    # The markers follow the commit: the offset counts once the one on
    # __consumer_offsets is written.
    assert wait_until(lambda: committed_offsets(broker.bootstrap, "aio-group", topic)[0] == 3, 10)


def test_an_idle_transactional_id_expires(broker_factory: Callable[..., BrokerProcess]) -> None:
    """transactional.id.expiration.ms after its last transaction the id is removed (a
    tombstone in __transaction_state, so it stays removed after a restart); the next
    producer with that id starts over at a new producer id."""
    server = broker_factory(
        {
            "transactional.id.expiration.ms": 1500,
            "transaction.remove.expired.transaction.cleanup.interval.ms": 300,
        }
    )
    create_topic(server.bootstrap, "short-lived", 1)
    p = producer(server.bootstrap, "forgetful")
    p.begin_transaction()
    p.produce("short-lived", b"x", partition=0)
    p.commit_transaction(20)
    first_id = describe(server.bootstrap, "forgetful").producer_id

    def not_found() -> bool:
        response = request(server.bootstrap, 65, 0, {"transactional_ids": ["forgetful"]})
        return bool(
            response.transaction_states[0].error_code == ErrorCode.transactional_id_not_found
        )

    assert wait_until(not_found, 15)
    assert "event=transactional_ids_expired" in server.log_text()
    # Restarted with expiration out of the way: only the tombstone can keep it gone.
    server.kill()
    server.overrides["transactional.id.expiration.ms"] = 3_600_000
    server.start()
    assert wait_until(not_found, 15)
    again = producer(server.bootstrap, "forgetful")
    again.begin_transaction()
    again.produce("short-lived", b"y", partition=0)
    again.commit_transaction(20)
    assert describe(server.bootstrap, "forgetful").producer_id != first_id
