"""KIP-890 part 1 against a real broker: before a transaction's first write to a
partition, the leader asks the transaction coordinator (AddPartitionsToTxn v4
verify_only, over the inter-broker listener) whether the partition is in the
producer's ongoing transaction.

- A raw transactional Produce to a partition the transaction does not include is
  INVALID_TXN_STATE and appends nothing; so is a late write after the transaction
  committed: nothing is left open and the last stable offset never gets stuck.
- The coordinator's other answers reach the producer as Kafka maps them (a stale
  epoch INVALID_PRODUCER_EPOCH, an unknown id INVALID_PRODUCER_ID_MAPPING); records
  without a transactional id are TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
- Many producers starting transactions at once are all verified, and
  confluent-kafka's transactional producer works as before; the leader's
  AddPartitionsToTxnManager batches questions per coordinator and answers replaced,
  unroutable and unreachable ones as Kafka's does.
- With transaction.partition.verification.enable=false the same late write is
  appended and leaves a hanging transaction: the key is honoured.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kio.schema.errors import ErrorCode

from support.broker import BrokerProcess
from support.clients import create_topic, running_broker, wait_until
from support.txn_wire import consume_confluent, request
from support.wire import WireClient
from support.wire_txn import WireTxn
from tiercel.config.broker_config import Listener
from tiercel.server.add_partitions_to_txn_manager import AddPartitionsToTxnManager
from tiercel.server.metadata.metadata_cache import MetadataCache, TopicMetadata
from tiercel.server.metadata.zk_data import BrokerRegistration
from tiercel.server.partition import PartitionState
from tiercel.storage.topic_partition import TopicPartition

TOPIC = "verified"
READ_UNCOMMITTED, READ_COMMITTED = 0, 1


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(Path(tmp_path_factory.mktemp("txn_verify"))) as broker:
        create_topic(broker.bootstrap, TOPIC, 2)
        yield broker


def latest(client: WireClient, partition: int, isolation: int) -> int:
    """ListOffsets LATEST: the log end (read_uncommitted) or the LSO (read_committed)."""
    response = request(
        client,
        2,
        7,
        {
            "replica_id": -1,
            "isolation_level": isolation,
            "topics": [
                {"name": TOPIC, "partitions": [{"partition_index": partition, "timestamp": -1}]}
            ],
        },
    )
    part = response.topics[0].partitions[0]
    assert part.error_code == ErrorCode.none
    return int(part.offset)


def ends(client: WireClient, partition: int) -> tuple[int, int]:
    return latest(client, partition, READ_UNCOMMITTED), latest(client, partition, READ_COMMITTED)


def late_write(txn: WireTxn, partition: int) -> tuple[ErrorCode, int]:
    """A write of ``txn``'s producer after its transaction ended, retried while the
    coordinator is still completing it (CONCURRENT_TRANSACTIONS, which produce answers
    as NOT_ENOUGH_REPLICAS)."""
    for _ in range(100):
        result = txn.produce(partition, b"late")
        if result[0] != ErrorCode.not_enough_replicas:
            return result
        time.sleep(0.1)
    raise AssertionError("the coordinator never completed the transaction")


def test_a_write_outside_the_transaction_is_refused_and_appends_nothing(
    broker: BrokerProcess,
) -> None:
    with WireClient(broker.bootstrap) as client:
        txn = WireTxn(client, "verify-1", TOPIC)
        assert txn.add(0) == ErrorCode.none
        assert txn.produce(1, b"stray") == (ErrorCode.invalid_txn_state, -1)
        assert ends(client, 1) == (0, 0)
        assert txn.produce(0, b"a") == (ErrorCode.none, 0)
        assert txn.produce(0, b"b") == (ErrorCode.none, 1)  # open here: no question
        assert ends(client, 0) == (2, 0)
        # The coordinator's other answers, as a producer expects them on a produce.
        assert txn.produce(1, b"x", epoch=txn.epoch + 1) == (
            ErrorCode.invalid_producer_epoch,
            -1,
        )
        assert txn.produce(1, b"x", transactional_id="verify-nobody") == (
            ErrorCode.invalid_producer_id_mapping,
            -1,
        )
        assert txn.produce(1, b"x", transactional_id=None) == (
            ErrorCode.transactional_id_authorization_failed,
            -1,
        )
        assert ends(client, 1) == (0, 0)
        txn.end(commit=True)
        assert wait_until(lambda: ends(client, 0) == (3, 3), 15)
        # A late write of the committed transaction would open one nobody ends.
        assert late_write(txn, 0) == (ErrorCode.invalid_txn_state, -1)
        assert ends(client, 0) == (3, 3)
        # The next transaction is verified afresh and commits as usual.
        assert txn.add(0, 1) == ErrorCode.none
        assert txn.produce(1, b"c") == (ErrorCode.none, 0)
        assert txn.produce(0, b"d") == (ErrorCode.none, 3)
        txn.end(commit=False)
        assert wait_until(lambda: ends(client, 0) == (5, 5) and ends(client, 1) == (2, 2), 15)
    assert consume_confluent(broker.bootstrap, TOPIC, "read_committed", 2) == [b"a", b"b"]


def test_many_producers_starting_transactions_at_once_are_all_verified(
    broker: BrokerProcess,
) -> None:
    results: dict[int, list[tuple[ErrorCode, int]]] = {}

    def one(i: int) -> None:
        with WireClient(broker.bootstrap) as client:
            txn = WireTxn(client, f"verify-many-{i}", TOPIC)
            assert txn.add(0, 1) == ErrorCode.none
            results[i] = [txn.produce(0, b"m%d" % i), txn.produce(1, b"m%d" % i)]
            txn.end(commit=True)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(results) == list(range(8))
    assert all(error == ErrorCode.none for pair in results.values() for error, _ in pair)


def test_confluent_kafka_transactional_producer_still_works(broker: BrokerProcess) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "verify-ck"})
    producer.init_transactions(20)
    with WireClient(broker.bootstrap) as client:
        before = ends(client, 0)[0]
    for commit in (True, False, True):
        producer.begin_transaction()
        for partition in (0, 1):
            producer.produce(TOPIC, b"ck-%s" % str(commit).encode(), partition=partition)
        if commit:
            producer.commit_transaction(20)
        else:
            producer.abort_transaction(20)
    with WireClient(broker.bootstrap) as client:
        # Markers land after EndTxn is answered; then nothing is left open. (An aborted
        # record librdkafka had not sent yet is purged: never written, never marked.)
        assert wait_until(lambda: len(set(ends(client, 0))) == 1, 15)
        assert ends(client, 0)[0] >= before + 4  # two committed records, their markers
    values = consume_confluent(broker.bootstrap, TOPIC, "read_committed", 4)
    assert values.count(b"ck-True") == 2 and b"ck-False" not in values


def test_with_verification_off_a_late_write_hangs_the_partition(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    off = broker_factory({"transaction.partition.verification.enable": "false"})
    create_topic(off.bootstrap, TOPIC, 2)
    with WireClient(off.bootstrap) as client:
        txn = WireTxn(client, "unverified", TOPIC)
        assert txn.add(0) == ErrorCode.none
        assert txn.produce(0, b"a") == (ErrorCode.none, 0)
        txn.end(commit=True)
        assert wait_until(lambda: ends(client, 0) == (2, 2), 15)
        assert txn.produce(0, b"late") == (ErrorCode.none, 2)  # nobody will end it
        assert txn.produce(1, b"stray") == (ErrorCode.none, 0)
        time.sleep(1)
        assert ends(client, 0) == (3, 2)
        assert ends(client, 1) == (1, 0)
        # Kafka checks the transactional id whatever the verification setting.
        assert txn.produce(1, b"x", transactional_id=None)[0] == (
            ErrorCode.transactional_id_authorization_failed
        )


def test_the_manager_batches_questions_and_answers_replaced_ones_as_kafka(
    broker: BrokerProcess,
) -> None:
    """AddPartitionsToTxnManager in this process, asking the broker: questions queued
    together go as one request; a second question for a queued transactional id
    replaces it (same epoch: the first gets NETWORK_EXCEPTION, a newer one fences it,
    an older one is fenced at once); no coordinator or an unreachable one are answered
    for every partition."""
    with WireClient(broker.bootstrap) as client:
        WireTxn(client, "verify-manager", TOPIC)
        txn = WireTxn(client, "verify-manager", TOPIC)  # epoch bumped: the old epoch is fenced
        assert txn.add(0) == ErrorCode.none
    host, port = broker.bootstrap.rsplit(":", 1)
    a0, a1 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)

    async def scenario() -> tuple[list[dict[TopicPartition, ErrorCode]], int]:
        cache = MetadataCache(99, "test")
        dead = _free_port()
        cache.put_brokers(
            {
                1: BrokerRegistration(1, (Listener("PLAINTEXT", host, int(port)),)),
                2: BrokerRegistration(2, (Listener("PLAINTEXT", "127.0.0.1", dead),)),
            }
        )
        states = {
            0: PartitionState(1, 0, (1,), (1,)),  # the broker under test
            1: PartitionState(2, 0, (2,), (2,)),  # nobody listens there
        }
        cache.put_topic(
            TopicMetadata("__transaction_state", uuid.uuid4(), {0: (1,), 1: (2,), 2: (1,)}, states)
        )
        route = {"verify-manager": 0, "verify-nobody": 0, "verify-dead": 1, "verify-none": 2}
        manager = AddPartitionsToTxnManager(99, cache, route.__getitem__, "PLAINTEXT", 5000)
        old, new, pid = txn.epoch - 1, txn.epoch, txn.producer_id
        asks = [
            ("verify-manager", old, [a0]),  # replaced by the next: NETWORK_EXCEPTION
            ("verify-manager", old, [a1]),  # fenced by the newer epoch
            ("verify-manager", new, [a0, a1]),  # sent
            ("verify-manager", old, [a0]),  # older than the queued one: fenced at once
            ("verify-nobody", new, [a0]),  # same request
            ("verify-dead", new, [a0]),
            ("verify-none", new, [a1]),
        ]
        try:
            answers = await asyncio.gather(
                *(manager.verify_transaction(tid, pid, epoch, tps) for tid, epoch, tps in asks)
            )
        finally:
            await manager.shutdown()
        return list(answers), manager.requests_sent

    answers, requests_sent = asyncio.run(scenario())
    assert answers == [
        {a0: ErrorCode.network_exception},
        {a1: ErrorCode.invalid_producer_epoch},
        {a1: ErrorCode.invalid_txn_state},  # a0 is in the transaction: verified
        {a0: ErrorCode.invalid_producer_epoch},
        {a0: ErrorCode.invalid_producer_id_mapping},
        {a0: ErrorCode.network_exception},
        {a1: ErrorCode.coordinator_not_available},
    ]
    assert requests_sent == 2  # one to the broker, one attempt at the dead one


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
