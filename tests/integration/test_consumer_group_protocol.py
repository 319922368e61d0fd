"""KIP-848 consumer groups with librdkafka (``group.protocol=consumer``): members in
separate processes split a topic by the broker's assignment, a SIGKILLed member's
partitions go to the survivors after the session timeout and they resume from its
committed offsets, a restarted broker keeps the group (members carry on with their
epochs) and its offsets, and the admin APIs see a consumer group.

Brokers run with a short consumer-group session timeout and heartbeat interval so that
every test takes seconds.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]

from support.broker import BrokerProcess
from support.clients import create_topic, wait_until
from support.group_members import (
    Member,
    committed,
    fill,
    lose_a_member,
    read_counts,
    split_evenly,
)
from support.wire import WireClient
from tiercel.protocol.entities import build_entity, request_class
from tiercel.protocol.errors import ErrorCode

SESSION_MS = 2000
OVERRIDES = {
    "group.consumer.session.timeout.ms": SESSION_MS,
    "group.consumer.heartbeat.interval.ms": 200,
}
KIP_848 = ("--protocol", "consumer", "--delay-ms", "10")  # support.group_member's flags


@pytest.fixture
def members() -> Iterator[list[Member]]:
    started: list[Member] = []
    yield started
    for member in started:
        member.kill()


def test_group_of_three_survives_a_killed_member(
    broker_factory: Callable[..., BrokerProcess], members: list[Member], tmp_path: Path
) -> None:
    broker = broker_factory(OVERRIDES)
    topic, group, partitions, per_partition = "kip848-orders", "kip848-processors", 6, 100
    create_topic(broker.bootstrap, topic, partitions)
    loss = lose_a_member(
        broker.bootstrap, topic, group, partitions, per_partition, tmp_path, members,
        KIP_848,
    )  # fmt: skip
    at_kill, victim_partitions = loss.committed_at_kill, loss.victim_partitions
    survivors = members[1:]
    unfinished = {p for p in victim_partitions if at_kill[p] < per_partition}
    assert unfinished, "the victim had finished its partitions before it was killed"
    # The survivors resumed the victim's partitions at its committed offsets...
    taken_over = {p: offset for p, (_, offset) in loss.taken_over.items()}
    assert taken_over == {p: at_kill[p] for p in unfinished}
    print(f"KIP-848 rebalance after member loss: {loss.rebalance_s:.2f}s (session timeout 2s)")
    assert loss.rebalance_s < 10
    assert "reason=session_expired" in broker.log_text()
    # ... nothing was lost, and only what the victim read but had not committed was
    # read twice.
    seen = read_counts(members)
    assert set(seen) == {(p, o) for p in range(partitions) for o in range(per_partition)}
    twice = {key for key, n in seen.items() if n > 1}
    assert twice <= {(p, at_kill[p]) for p in victim_partitions}, twice

    # A member that leaves (member epoch -1) hands its partitions over at once, well
    # within the session timeout.
    leaving, last = survivors
    left_at = time.time()
    leaving.stop()
    assert wait_until(lambda: last.assignment() == set(range(partitions)), SESSION_MS / 1000)
    print(f"KIP-848 rebalance after a member left: {time.time() - left_at:.2f}s")
    last.stop()
    final = committed(broker.bootstrap, group, topic, partitions)
    assert final == dict.fromkeys(range(partitions), per_partition)
    broker.restart()
    assert committed(broker.bootstrap, group, topic, partitions) == final


def test_a_restarted_broker_keeps_the_group_and_its_offsets(
    broker_factory: Callable[..., BrokerProcess], members: list[Member], tmp_path: Path
) -> None:
    # Sessions long enough to outlast the restart: the members keep their places.
    broker = broker_factory({**OVERRIDES, "group.consumer.session.timeout.ms": 20000})
    topic, group, partitions = "kip848-restart", "kip848-restart-group", 4
    create_topic(broker.bootstrap, topic, partitions)
    members += [
        Member(broker.bootstrap, topic, group, tmp_path / f"r{i}.log", *KIP_848) for i in range(2)
    ]
    assert wait_until(lambda: split_evenly(members, partitions), 30), [m.events() for m in members]
    fill(broker.bootstrap, topic, partitions, 20)
    assert wait_until(lambda: len(read_counts(members)) == partitions * 20, 30)
    assert wait_until(
        lambda: (
            committed(broker.bootstrap, group, topic, partitions)
            == dict.fromkeys(range(partitions), 20)
        ),
        20,
    )
    held = [m.assignment() for m in members]
    broker.restart()
    fill(broker.bootstrap, topic, partitions, 20, start=20)
    assert wait_until(lambda: len(read_counts(members)) == partitions * 40, 60), [
        m.events() for m in members
    ]
    time.sleep(0.5)  # anything read twice would show now
    assert all(n == 1 for n in read_counts(members).values())
    assert [m.assignment() for m in members] == held
    assert "consumer_group_member_fenced" not in broker.log_text()

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    listed = admin.list_consumer_groups().result(10)
    [ours] = [g for g in listed.valid if g.group_id == group]
    assert ours.type.name == "CONSUMER"
    described = admin.describe_consumer_groups([group])[group].result(10)
    assert described.type.name == "CONSUMER"
    assert sorted(len(m.assignment.topic_partitions) for m in described.members) == [2, 2]


def test_the_wire_protocol_of_a_consumer_group(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory(OVERRIDES)
    create_topic(broker.bootstrap, "wire-topic", 3)
    with WireClient(broker.bootstrap) as client:

        def call(api_key: int, version: int, fields: dict[str, Any]) -> Any:
            request = build_entity(request_class(api_key, version), fields, fill_missing=True)
            return client.request(request)

        coordinator = call(10, 4, {"key_type": 0, "coordinator_keys": ["wire-group"]})
        assert coordinator.coordinators[0].error_code == ErrorCode.none
        join = {
            "group_id": "wire-group",
            "member_id": "wire-member",
            "member_epoch": 0,
            "rebalance_timeout": datetime.timedelta(seconds=30),
            "subscribed_topic_names": ["wire-topic"],
            "subscribed_topic_regex": None,
            "server_assignor": "range",
            "topic_partitions": [],
        }
        joined = call(68, 1, join)
        assert (joined.error_code, joined.member_id, joined.member_epoch) == (
            ErrorCode.none,
            "wire-member",
            1,
        )
        assert joined.heartbeat_interval == datetime.timedelta(milliseconds=200)
        [assigned] = joined.assignment.topic_partitions
        assert sorted(assigned.partitions) == [0, 1, 2]
        fenced = call(68, 1, {**join, "member_epoch": 5, "topic_partitions": None})
        assert fenced.error_code == ErrorCode.fenced_member_epoch
        assert "greater member epoch" in fenced.error_message

        [described] = call(69, 1, {"group_ids": ["wire-group"]}).groups
        assert (described.group_state, described.group_epoch, described.assignor_name) == (
            "Stable",
            1,
            "range",
        )
        [member] = described.members
        assert (member.member_id, member.member_type) == ("wire-member", 1)
        assert [t.topic_name for t in member.assignment.topic_partitions] == ["wire-topic"]
        # DescribeGroups only describes classic groups (Kafka 4); ListGroups lists both.
        [classic_view] = call(15, 6, {"groups": ["wire-group"]}).groups
        assert (classic_view.group_state, classic_view.error_code) == (
            "Dead",
            ErrorCode.group_id_not_found,
        )
        assert call(15, 5, {"groups": ["wire-group"]}).groups[0].error_code == ErrorCode.none
        listed = call(16, 5, {"states_filter": [], "types_filter": ["consumer"]}).groups
        assert [(g.group_id, g.group_type, g.protocol_type) for g in listed] == [
            ("wire-group", "consumer", "consumer")
        ]
        # A classic member cannot join the consumer group.
        classic_join = call(
            11,
            5,
            {
                "group_id": "wire-group",
                "session_timeout": datetime.timedelta(seconds=10),
                "rebalance_timeout": datetime.timedelta(seconds=10),
                "member_id": "",
                "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b""}],
            },
        )
        assert classic_join.error_code == ErrorCode.inconsistent_group_protocol
        left = call(68, 1, {**join, "member_epoch": -1, "topic_partitions": None})
        assert (left.error_code, left.member_epoch) == (ErrorCode.none, -1)
        [empty] = call(69, 0, {"group_ids": ["wire-group"]}).groups
        assert (empty.group_state, empty.members) == ("Empty", ())
