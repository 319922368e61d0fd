"""OffsetForLeaderEpoch, DescribeLogDirs and DescribeTopicPartitions, on the wire.

These have no convenient call in every client, so the requests are kio entities sent on
a raw connection (tests/support/wire.py) and the answers are checked field by field.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kio.schema.describe_log_dirs.v4.request import DescribableLogDirTopic, DescribeLogDirsRequest
from kio.schema.describe_topic_partitions.v0.request import (
    Cursor,
    DescribeTopicPartitionsRequest,
    TopicRequest,
)
from kio.schema.errors import ErrorCode
from kio.schema.offset_for_leader_epoch.v4.request import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)
from kio.schema.types import TopicName
from kio.static.primitive import i32

from support.broker import BrokerProcess
from support.clients import create_topic, running_broker, wait_until
from support.wire import WireClient


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(Path(tmp_path_factory.mktemp("describe"))) as broker:
        create_topic(broker.bootstrap, "epochs", 1)
        create_topic(broker.bootstrap, "wide", 5)
        create_topic(broker.bootstrap, "narrow", 2)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
        for i in range(30):
            producer.produce("epochs", b"%d" % i)
        assert producer.flush(15) == 0
        yield broker


def _epoch_request(leader_epoch: int, current: int = -1, topic: str = "epochs") -> object:
    return OffsetForLeaderEpochRequest(
        replica_id=i32(-1),
        topics=(
            OffsetForLeaderTopic(
                topic=TopicName(topic),
                partitions=(
                    OffsetForLeaderPartition(
                        partition=i32(0),
                        current_leader_epoch=i32(current),
                        leader_epoch=i32(leader_epoch),
                    ),
                ),
            ),
        ),
    )


@pytest.mark.parametrize(
    ("leader_epoch", "current", "expected"),
    [
        (0, -1, (ErrorCode.none, 0, 30)),  # the latest epoch ends at the log end offset
        (0, 0, (ErrorCode.none, 0, 30)),
        (7, -1, (ErrorCode.none, -1, -1)),  # above every known epoch: undefined
        (-1, -1, (ErrorCode.none, -1, -1)),
        (0, 3, (ErrorCode.unknown_leader_epoch, -1, -1)),  # KIP-320 fencing
    ],
)
def test_offset_for_leader_epoch_answers_from_the_epoch_cache(
    shared: BrokerProcess, leader_epoch: int, current: int, expected: tuple[ErrorCode, int, int]
) -> None:
    with WireClient(shared.bootstrap) as client:
        response = client.request(_epoch_request(leader_epoch, current))
    partition = response.topics[0].partitions[0]
    assert (partition.error_code, partition.leader_epoch, partition.end_offset) == expected
    # The checkpoint is written in the background once the epoch's first batch is in.
    checkpoint = shared.log_dir / "epochs-0" / "leader-epoch-checkpoint"
    assert wait_until(lambda: checkpoint.exists() and checkpoint.read_text() == "0\n1\n0 0\n", 5)


def test_offset_for_leader_epoch_unknown_partition(shared: BrokerProcess) -> None:
    with WireClient(shared.bootstrap) as client:
        response = client.request(_epoch_request(0, topic="missing"))
    assert response.topics[0].partitions[0].error_code == ErrorCode.unknown_topic_or_partition


def test_describe_log_dirs_reports_sizes_of_every_partition(shared: BrokerProcess) -> None:
    with WireClient(shared.bootstrap) as client:
        everything = client.request(DescribeLogDirsRequest(topics=None))
        one = client.request(
            DescribeLogDirsRequest(
                topics=(DescribableLogDirTopic(topic=TopicName("epochs"), partitions=(i32(0),)),)
            )
        )
    (log_dir,) = everything.results
    assert log_dir.error_code == ErrorCode.none
    assert Path(log_dir.log_dir) == shared.log_dir.resolve()
    assert 0 < log_dir.usable_bytes <= log_dir.total_bytes
    sizes = {
        (t.name, p.partition_index): p.partition_size for t in log_dir.topics for p in t.partitions
    }
    assert set(sizes) == {
        ("epochs", 0),
        *(("wide", p) for p in range(5)),
        ("narrow", 0),
        ("narrow", 1),
    }
    segment = shared.log_dir / "epochs-0" / "00000000000000000000.log"
    assert sizes[("epochs", 0)] == segment.stat().st_size > 0
    assert sizes[("wide", 3)] == 0
    (only,) = one.results
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in only.topics] == [
        ("epochs", [0])
    ]


def test_describe_topic_partitions_pages_with_a_cursor(shared: BrokerProcess) -> None:
    topics = (
        TopicRequest(name=TopicName("narrow")),
        TopicRequest(name=TopicName("wide")),
        TopicRequest(name=TopicName("missing")),
    )
    seen: list[tuple[str, int]] = []
    cursor = None
    errors = {}
    with WireClient(shared.bootstrap) as client:
        for _ in range(10):
            response = client.request(
                DescribeTopicPartitionsRequest(
                    topics=topics, response_partition_limit=i32(3), cursor=cursor
                )
            )
            for topic in response.topics:
                errors[topic.name] = topic.error_code
                for p in topic.partitions:
                    assert (p.leader_id, p.leader_epoch, p.replica_nodes, p.isr_nodes) == (
                        1,
                        0,
                        (1,),
                        (1,),
                    )
                    seen.append((topic.name, p.partition_index))
            if response.next_cursor is None:
                break
            cursor = Cursor(
                topic_name=response.next_cursor.topic_name,
                partition_index=response.next_cursor.partition_index,
            )
    assert seen == [("narrow", 0), ("narrow", 1), *(("wide", p) for p in range(5))]
    assert errors == {
        "narrow": ErrorCode.none,
        "wide": ErrorCode.none,
        "missing": ErrorCode.unknown_topic_or_partition,
    }
