"""ListOffsets' KIP-405 specs on the wire, on a topic that does not tier: EARLIEST_LOCAL
(-4, v8+) is the log start, LATEST_TIERED (-5, v9+) and EARLIEST_PENDING_UPLOAD (-6,
v11+, KIP-1023) answer -1 with epoch -1 as Kafka's, and a version too old for a spec is
UNSUPPORTED_VERSION; kafka-python's EARLIEST_LOCAL and LATEST_TIERED agree."""

from __future__ import annotations

import datetime
import importlib
from collections.abc import Iterator
from typing import Any

import kafka
import kafka.admin
import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32, i32Timedelta, i64

from support.broker import BrokerProcess
from support.clients import Outgoing, create_topic, produce, running_broker
from support.wire import WireClient

TOPIC = "tiered-specs"


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("tiered_specs")) as broker:
        create_topic(broker.bootstrap, TOPIC, 1)
        records = [Outgoing(0, b"v%d" % i, None, (), None) for i in range(5)]
        produce("confluent", broker.bootstrap, TOPIC, records, {})
        yield broker


def list_offsets(broker: BrokerProcess, version: int, timestamp: int) -> tuple[int, int, int]:
    request_type = load_request_schema(2, version)
    module = importlib.import_module(request_type.__module__)
    fields: dict[str, Any] = {
        "replica_id": i32(-1),
        "isolation_level": i8(0),
        "topics": (
            module.ListOffsetsTopic(
                name=TOPIC,
                partitions=(
                    module.ListOffsetsPartition(partition_index=i32(0), timestamp=i64(timestamp)),
                ),
            ),
        ),
    }
    if version >= 10:
        fields["timeout"] = i32Timedelta.parse(datetime.timedelta(seconds=30))
    with WireClient(broker.bootstrap) as client:
        response = client.request(request_type(**fields))
    (partition,) = response.topics[0].partitions
    return partition.error_code, partition.offset, partition.leader_epoch


@pytest.mark.parametrize(
    ("timestamp", "first_version", "expected"),
    [(-4, 8, (0, 0)), (-5, 9, (-1, -1)), (-6, 11, (-1, -1))],
)
def test_the_tiered_specs_per_version(
    shared: BrokerProcess, timestamp: int, first_version: int, expected: tuple[int, int]
) -> None:
    error, _, _ = list_offsets(shared, first_version - 1, timestamp)
    assert error == ErrorCode.unsupported_version
    for version in range(first_version, 12):
        assert list_offsets(shared, version, timestamp) == (ErrorCode.none, *expected)


def test_kafka_python_earliest_local_and_latest_tiered(shared: BrokerProcess) -> None:
    admin = kafka.KafkaAdminClient(bootstrap_servers=shared.bootstrap)
    try:
        tp = kafka.TopicPartition(TOPIC, 0)
        local = admin.list_partition_offsets({tp: kafka.OffsetSpec.EARLIEST_LOCAL})[tp]
        tiered = admin.list_partition_offsets({tp: kafka.OffsetSpec.LATEST_TIERED})[tp]
    finally:
        admin.close()
    assert (local.offset, tiered.offset) == (0, -1)
