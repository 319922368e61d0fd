"""Partition counts in CreateTopics and CreatePartitions are bounded by max.partitions.

Sent as raw requests (librdkafka refuses more than 100,000 partitions client-side): a
count of 2^31 - 1 used to stall the broker for half a minute and end in MemoryError. Now
every oversized request gets POLICY_VIOLATION at once, the broker keeps serving, and
nothing is logged as an unexpected error.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest
from kio.schema.create_partitions.v3.request import (
    CreatePartitionsAssignment,
    CreatePartitionsRequest,
    CreatePartitionsTopic,
)
from kio.schema.create_topics.v7.request import (
    CreatableReplicaAssignment,
    CreatableTopic,
    CreateTopicsRequest,
)
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i16, i32, i32Timedelta

from support.broker import BrokerProcess
from support.wire import WireClient

T = TypeVar("T")
INT32_MAX = 2**31 - 1
LIMIT = 20  # max.partitions of the small broker
# A refusal takes no per-partition work: the broker's CPU seconds for the request, not
# wall time, which a loaded 2-core machine stretches (3.6 s seen for a 0.8 s decode).
FAST_CPU_S = 2.0


def _timeout() -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(seconds=10))


def create_topics(client: WireClient, *topics: CreatableTopic) -> dict[str, tuple[int, str]]:
    response = client.request(
        CreateTopicsRequest(topics=topics, timeout=_timeout(), validate_only=False)
    )
    return {t.name: (t.error_code, t.error_message or "") for t in response.topics}


def topic(
    name: str, partitions: int, factor: int = 1, assignments: tuple[int, ...] = ()
) -> CreatableTopic:
    return CreatableTopic(
        name=TopicName(name),
        num_partitions=i32(partitions),
        replication_factor=i16(factor),
        assignments=tuple(
            CreatableReplicaAssignment(partition_index=i32(p), broker_ids=(BrokerId(b),))
            for p, b in enumerate(assignments)
        ),
        configs=(),
    )


def create_partitions(
    client: WireClient, name: str, count: int, assignments: int | None = None
) -> tuple[int, str]:
    response = client.request(
        CreatePartitionsRequest(
            topics=(
                CreatePartitionsTopic(
                    name=TopicName(name),
                    count=i32(count),
                    assignments=None
                    if assignments is None
                    else tuple(
                        CreatePartitionsAssignment(broker_ids=(BrokerId(1),))
                        for _ in range(assignments)
                    ),
                ),
            ),
            timeout=_timeout(),
            validate_only=False,
        )
    )
    (result,) = response.results
    return result.error_code, result.error_message or ""


def partition_count(client: WireClient, name: str) -> int:
    response = client.request(
        MetadataRequest(
            topics=(MetadataRequestTopic(topic_id=None, name=TopicName(name)),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    )
    (described,) = response.topics
    assert described.error_code == ErrorCode.none
    return len(described.partitions)


def cpu_seconds(broker: BrokerProcess) -> float:
    """User and system CPU seconds the broker process has used (/proc/PID/stat)."""
    with open(f"/proc/{broker.proc.pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(broker: BrokerProcess, call: Callable[[], T]) -> tuple[T, float]:
    """``call``'s result and the broker's CPU seconds while it ran."""
    start = cpu_seconds(broker)
    result = call()
    return result, cpu_seconds(broker) - start


@pytest.fixture
def no_unexpected_errors() -> Iterator[list[BrokerProcess]]:
    brokers: list[BrokerProcess] = []
    yield brokers
    for broker in brokers:
        log = broker.log_text()
        for sign_of_a_bug in ("event=unexpected_error", "Traceback", "MemoryError"):
            assert sign_of_a_bug not in log


def test_int32_max_partitions_are_refused_at_once_with_the_default_limit(
    broker: BrokerProcess, no_unexpected_errors: list[BrokerProcess]
) -> None:
    no_unexpected_errors.append(broker)
    with WireClient(broker.bootstrap, timeout=30) as client:
        results, elapsed = timed(broker, lambda: create_topics(client, topic("huge", INT32_MAX)))
        assert elapsed < FAST_CPU_S
        code, message = results["huge"]
        assert code == ErrorCode.policy_violation
        assert f"Cannot add {INT32_MAX} partitions" in message and "max.partitions" in message

        assert create_topics(client, topic("t", 1))["t"][0] == ErrorCode.none
        (code, message), elapsed = timed(broker, lambda: create_partitions(client, "t", INT32_MAX))
        assert elapsed < FAST_CPU_S
        assert code == ErrorCode.policy_violation and "max.partitions is 10000" in message

        # Still serving, and nothing was half-made.
        assert partition_count(client, "t") == 1
        assert create_topics(client, topic("huge", 1))["huge"][0] == ErrorCode.none


def test_the_limit_counts_the_whole_cluster_and_each_request_in_full(
    broker_factory: Callable[..., BrokerProcess], no_unexpected_errors: list[BrokerProcess]
) -> None:
    broker = broker_factory(overrides={"max.partitions": LIMIT, "offsets.topic.num.partitions": 1})
    no_unexpected_errors.append(broker)
    with WireClient(broker.bootstrap, timeout=30) as client:
        assert create_topics(client, topic("a", 15))["a"][0] == ErrorCode.none
        # Topics earlier in the same request count, whether or not metadata shows them yet.
        results = create_topics(client, topic("b", 3), topic("c", 3))
        assert results["b"][0] == ErrorCode.none
        assert results["c"] == (
            ErrorCode.policy_violation,
            "Cannot add 3 partitions: the cluster has 18 and max.partitions is 20.",
        )
        assert create_partitions(client, "a", 17) == (ErrorCode.none, "")
        assert create_partitions(client, "a", 18)[0] == ErrorCode.policy_violation
        assert partition_count(client, "a") == 17

        # Explicit assignments count as partitions too, before they are looked at.
        (code, message), elapsed = timed(
            broker,
            lambda: create_topics(client, topic("d", -1, -1, assignments=(1,) * 100_000))["d"],
        )
        assert elapsed < FAST_CPU_S and code == ErrorCode.policy_violation
        assert "Cannot add 100000 partitions" in message
        (code, _), elapsed = timed(broker, lambda: create_partitions(client, "b", 100_003, 100_000))
        assert elapsed < FAST_CPU_S and code == ErrorCode.policy_violation

        # A replication factor beyond the brokers is refused before any assignment.
        (code, _), elapsed = timed(broker, lambda: create_topics(client, topic("e", 1, 32767))["e"])
        assert elapsed < FAST_CPU_S and code == ErrorCode.invalid_replication_factor
        assert partition_count(client, "b") == 3
