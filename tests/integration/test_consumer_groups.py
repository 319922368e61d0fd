"""Consumer groups with real clients: librdkafka members in separate processes surviving a
SIGKILLed member, kafka-python and aiokafka groups splitting a topic, static membership
across a restart, committed offsets across a broker restart, and the group admin APIs.

Brokers run with short timeouts (no initial rebalance delay, sessions from one second) so
that every rebalance takes a fraction of a second plus the session timeout it waits for.
"""

from __future__ import annotations

import asyncio
import datetime
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiokafka
import kafka
import kafka.errors
import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]

from support.broker import BrokerProcess
from support.clients import create_topic, running_broker, wait_until, watermarks
from support.group_members import Member, committed, fill, lose_a_member, read_counts
from support.wire import WireClient
from tiercel.protocol.entities import build_entity, request_class
from tiercel.protocol.errors import ErrorCode
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch

GROUP_OVERRIDES = {
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 1000,
}


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("groups"), GROUP_OVERRIDES) as broker:
        yield broker


@pytest.fixture
def members() -> Iterator[list[Member]]:
    started: list[Member] = []
    yield started
    for member in started:
        member.kill()


def test_librdkafka_group_survives_a_killed_member(
    broker_factory: Callable[..., BrokerProcess], members: list[Member], tmp_path: Path
) -> None:
    broker = broker_factory(GROUP_OVERRIDES)
    topic, group, partitions, per_partition = "orders", "order-processors", 6, 100
    create_topic(broker.bootstrap, topic, partitions)
    loss = lose_a_member(
        broker.bootstrap, topic, group, partitions, per_partition, tmp_path, members,
        ("--session-ms", "2000", "--delay-ms", "10"),
    )  # fmt: skip
    at_kill, victim_partitions = loss.committed_at_kill, loss.victim_partitions
    survivors = members[1:]

    # The survivors took the victim's partitions over at its committed offsets.
    unfinished = {p for p in victim_partitions if at_kill[p] < per_partition}
    assert unfinished, "the victim had finished its partitions before it was killed"
    assert {p: offset for p, (_, offset) in loss.taken_over.items()} == {
        p: at_kill[p] for p in unfinished
    }
    print(f"rebalance after member loss: {loss.rebalance_s:.2f}s (session timeout 2s)")
    assert loss.rebalance_s < 10

    # Nothing lost; read twice only what the victim read but had not committed.
    seen = read_counts(members)
    assert set(seen) == {(p, o) for p in range(partitions) for o in range(per_partition)}
    twice = {key for key, n in seen.items() if n > 1}
    assert twice <= {(p, at_kill[p]) for p in victim_partitions}, twice

    for member in survivors:
        member.stop()
    final = committed(broker.bootstrap, group, topic, partitions)
    assert final == dict.fromkeys(range(partitions), per_partition)
    broker.restart()
    assert committed(broker.bootstrap, group, topic, partitions) == final


def test_static_member_restart_gets_its_partitions_back_without_rebalance(
    shared: BrokerProcess, members: list[Member], tmp_path: Path
) -> None:
    topic, group = "static-topic", "static-group"
    create_topic(shared.bootstrap, topic, 4)
    session = ("--session-ms", "10000")
    members += [
        Member(
            shared.bootstrap, topic, group, tmp_path / f"s{i}.log", *session, "--instance", f"s{i}"
        )
        for i in range(2)
    ]
    assert wait_until(lambda: all(len(m.assignment()) == 2 for m in members), 30)
    survivor, restarted = members
    before = restarted.assignment()
    survivor_events = len(survivor.events())
    log_before = shared.log_text().count("preparing_rebalance group=static-group")
    restarted.kill()
    restarted.out.write_text("")
    restarted.restart()
    assert wait_until(lambda: restarted.assignment() == before, 8), restarted.events()
    time.sleep(0.5)
    assert survivor.events()[survivor_events:] == []  # no revocation, no new assignment
    assert shared.log_text().count("preparing_rebalance group=static-group") == log_before


# -- kafka-python and aiokafka ---------------------------------------------------------------


def _two_kafka_python_members(
    bootstrap: str, topic: str, group: str, total: int
) -> list[list[Any]]:
    stop = threading.Event()
    consumers = [
        kafka.KafkaConsumer(
            topic,
            group_id=group,
            bootstrap_servers=bootstrap,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=6000,
            heartbeat_interval_ms=300,
            fetch_max_wait_ms=100,
        )
        for _ in range(2)
    ]
    received: list[list[Any]] = [[], []]

    def run(i: int) -> None:
        # A poll that times out while a rebalance is in flight can leave kafka-python
        # 3.0 without its assignment (it never finishes the join it gave up waiting
        # for): poll long enough for a rebalance to complete.
        while not stop.is_set():
            for batch in consumers[i].poll(timeout_ms=2000).values():
                received[i].extend((m.partition, m.offset) for m in batch)
                consumers[i].commit()

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(2)]
    for thread in threads:
        thread.start()
    try:
        split = wait_until(
            lambda: (
                all(c.assignment() for c in consumers)
                and sum(len(c.assignment()) for c in consumers) == 4
            ),
            30,
        )
        assert split, "the group never split the topic between its members"
        fill(bootstrap, topic, 4, total // 4)
        assert wait_until(lambda: sum(map(len, received)) >= total, 30)
        time.sleep(0.5)  # anything read twice would arrive now
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
        for consumer in consumers:
            consumer.close()
    return received


async def _two_aiokafka_members(
    bootstrap: str, topic: str, group: str, total: int
) -> list[list[Any]]:
    consumers = [
        aiokafka.AIOKafkaConsumer(
            topic,
            group_id=group,
            bootstrap_servers=bootstrap,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=6000,
            heartbeat_interval_ms=300,
            fetch_max_wait_ms=100,
        )
        for _ in range(2)
    ]
    received: list[list[Any]] = [[], []]
    stop = asyncio.Event()

    async def run(i: int) -> None:
        while not stop.is_set():
            batches = await consumers[i].getmany(timeout_ms=100)
            for batch in batches.values():
                received[i].extend((m.partition, m.offset) for m in batch)
            if batches:
                await consumers[i].commit()

    await asyncio.gather(*(c.start() for c in consumers))
    tasks = [asyncio.create_task(run(i)) for i in range(2)]
    try:
        deadline = time.monotonic() + 30
        while not (
            all(c.assignment() for c in consumers)
            and sum(len(c.assignment()) for c in consumers) == 4
        ):
            assert time.monotonic() < deadline, "the group never split the topic"
            await asyncio.sleep(0.1)
        await asyncio.to_thread(fill, bootstrap, topic, 4, total // 4)
        while sum(map(len, received)) < total:
            assert time.monotonic() < deadline + 30
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)
    finally:
        stop.set()
        await asyncio.gather(*tasks)
        await asyncio.gather(*(c.stop() for c in consumers))
    return received


@pytest.mark.parametrize("client", ["kafka-python", "aiokafka"])
def test_group_splits_a_topic_without_reading_twice(shared: BrokerProcess, client: str) -> None:
    topic, group, total = f"split-{client}", f"split-group-{client}", 200
    create_topic(shared.bootstrap, topic, 4)
    if client == "kafka-python":
        received = _two_kafka_python_members(shared.bootstrap, topic, group, total)
    else:
        received = asyncio.run(_two_aiokafka_members(shared.bootstrap, topic, group, total))
    assert all(received), "one member got nothing"
    together = received[0] + received[1]
    assert len(together) == len(set(together)) == total
    assert not {p for p, _ in received[0]} & {p for p, _ in received[1]}
    assert committed(shared.bootstrap, group, topic, 4) == dict.fromkeys(range(4), total // 4)


# -- administration ----------------------------------------------------------------------------


def test_group_admin_apis(shared: BrokerProcess) -> None:
    bootstrap, topic = shared.bootstrap, "admin-groups"
    create_topic(bootstrap, topic, 2)
    fill(bootstrap, topic, 2, 5)
    python_admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap)
    tp0, tp1 = kafka.TopicPartition(topic, 0), kafka.TopicPartition(topic, 1)
    for group, base in (("simple-a", 1), ("simple-b", 3)):
        # Offsets without a group member (generation -1): OffsetCommit from the admin.
        altered = python_admin.alter_group_offsets(
            group,
            {
                tp0: kafka.structs.OffsetAndMetadata(base, f"meta {group} ✓", -1),
                tp1: kafka.structs.OffsetAndMetadata(base + 1, "", -1),
            },
        )
        assert altered == {tp0: kafka.errors.NoError, tp1: kafka.errors.NoError}
    active = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "active", "session.timeout.ms": 6000}
    )
    active.subscribe([topic])
    assert wait_until(lambda: active.poll(0.1) is not None or bool(active.assignment()), 30)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        listed = admin.list_consumer_groups().result(10)
        states = {g.group_id: g.state.name for g in listed.valid}
        assert {k: states.get(k) for k in ("simple-a", "simple-b", "active")} == {
            "simple-a": "EMPTY",
            "simple-b": "EMPTY",
            "active": "STABLE",
        }
        described = admin.describe_consumer_groups(["active"])["active"].result(10)
        assert described.state.name == "STABLE" and described.partition_assignor == "range"
        (member,) = described.members
        assert {tp.partition for tp in member.assignment.topic_partitions} == {0, 1}
        assert member.host == "/127.0.0.1"

        # One OffsetFetch (v8) for both groups; metadata strings come back as committed.
        offsets = python_admin.list_group_offsets({"simple-a": None, "simple-b": None})
        fetched = {
            group: {tp: (o.offset, o.metadata) for tp, o in by_tp.items()}
            for group, by_tp in offsets.items()
        }
        assert fetched == {
            "simple-a": {tp0: (1, "meta simple-a ✓"), tp1: (2, "")},
            "simple-b": {tp0: (3, "meta simple-b ✓"), tp1: (4, "")},
        }

        deleted = python_admin.delete_group_offsets("simple-a", [tp0])
        assert deleted == {tp0: kafka.errors.NoError}
        assert python_admin.list_group_offsets("simple-a")["simple-a"].keys() == {tp1}
        in_use = python_admin.delete_group_offsets("active", [tp0])
        assert in_use == {tp0: kafka.errors.GroupSubscribedToTopicError}

        results = admin.delete_consumer_groups(["simple-b", "active"])
        results["simple-b"].result(10)
        with pytest.raises(Exception, match="NON_EMPTY_GROUP"):
            results["active"].result(10)
        remaining = {g.group_id for g in admin.list_consumer_groups().result(10).valid}
        assert "simple-b" not in remaining and "active" in remaining
    finally:
        python_admin.close()
        active.close()


def test_clients_cannot_produce_to_internal_topics(shared: BrokerProcess) -> None:
    committed(shared.bootstrap, "any-group", "admin-groups", 1)  # the offsets topic exists
    request = build_entity(
        request_class(0, 9),
        {
            "acks": -1,
            "timeout": datetime.timedelta(seconds=5),
            "topic_data": [
                {
                    "name": "__consumer_offsets",
                    "partition_data": [
                        {"index": 0, "records": build_record_batch([SimpleRecord(b"k", b"forged")])}
                    ],
                }
            ],
        },
        fill_missing=True,
    )
    with WireClient(shared.bootstrap) as client:
        response = client.request(request)
    (partition,) = response.responses[0].partition_responses
    assert partition.error_code == ErrorCode.invalid_topic_exception


def test_a_group_lives_in_the_partition_kafka_computes(shared: BrokerProcess) -> None:
    """Utils.abs("my-group".hashCode) % 50 = 12: its commits land in __consumer_offsets-12,
    as in a Kafka log directory (masking the sign bit would give 36)."""
    create_topic(shared.bootstrap, "placed")
    committed(shared.bootstrap, "any-group", "placed", 1)  # the offsets topic exists
    before = {p: watermarks(shared.bootstrap, "__consumer_offsets", p)[1] for p in (12, 36)}
    consumer = Consumer({"bootstrap.servers": shared.bootstrap, "group.id": "my-group"})
    try:
        consumer.commit(offsets=[CTopicPartition("placed", 0, 0)], asynchronous=False)
    finally:
        consumer.close()
    after = {p: watermarks(shared.bootstrap, "__consumer_offsets", p)[1] for p in (12, 36)}
    assert after[12] > before[12] and after[36] == before[36]
    assert committed(shared.bootstrap, "my-group", "placed", 1) == {0: 0}
