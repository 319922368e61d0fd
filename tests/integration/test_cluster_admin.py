"""Cluster administration: three combined KRaft nodes (tests/support/cluster.py).

One node is the active controller and every broker names it in DescribeQuorum, while
Metadata and DescribeCluster name an alive broker as the controller (Kafka's
KRaftMetadataCache: clients send admin requests to any broker, which forwards them);
topics created from a broker that is not the controller's node get replicas and
leaders spread over the cluster; DeleteTopics removes the partition directories on
every broker; ElectLeaders puts the preferred replica back in the lead; a SIGKILLed
active controller is replaced and topics can be created again; a SIGTERMed broker has
its leaderships moved before it exits (controlled shutdown through its heartbeats);
AlterPartitionReassignments moves a partition to other brokers; producer ids are unique
across brokers; group coordination fails over with the leadership of
__consumer_offsets.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import pytest
from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    ElectionType,
    KafkaError,
    KafkaException,
)
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]

from support.broker import BrokerProcess
from support.clients import Outgoing, consume, produce, wait_until
from support.cluster import ClusterProcess
from support.wire import WireClient
from tiercel.protocol.entities import build_entity, request_class

# Kafka's error codes.
NONE: Final = 0
UNKNOWN_TOPIC_OR_PARTITION: Final = 3
INVALID_REPLICATION_FACTOR: Final = 38
BROKER_IDS: Final = (1, 2, 3)
OVERRIDES: Final = {
    # Leadership moves only when a test asks for it.
    "auto.leader.rebalance.enable": False,
    "offsets.topic.num.partitions": 3,
}
WAIT_S: Final = 20.0
# OffsetCommit's per-partition errors after which Kafka's AdminClient commits again
# (AlterConsumerGroupOffsetsHandler, finding the coordinator again for the first two).
RETRIABLE_COMMIT_ERRORS: Final = frozenset(
    {
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    }
)


def request(bootstrap: str, api_key: int, version: int, fields: Mapping[str, Any]) -> Any:
    """Send one request built from `fields` (the rest at their defaults) and return the
    response entity."""
    with WireClient(bootstrap) as client:
        return client.request(build_entity(request_class(api_key, version), fields, True))


@dataclass
class Cluster:
    process: ClusterProcess

    @property
    def brokers(self) -> dict[int, BrokerProcess]:
        return self.process.brokers

    def live(self) -> dict[int, BrokerProcess]:
        return {i: b for i, b in self.brokers.items() if b.running}

    def bootstrap(self, broker_id: int | None = None) -> str:
        if broker_id is not None:
            return self.brokers[broker_id].bootstrap
        return ",".join(b.bootstrap for b in self.live().values())

    def metadata(self, broker_id: int, topics: Iterable[str] | None = None) -> Any:
        wanted = None if topics is None else [{"name": t} for t in topics]
        return request(
            self.bootstrap(broker_id),
            3,
            12,
            {"topics": wanted, "allow_auto_topic_creation": False},
        )

    def quorum_leader(self, broker_id: int) -> int:
        """The active controller as broker ``broker_id`` tells it: DescribeQuorum, which
        it forwards to the controller (kafka-metadata-quorum --bootstrap-server)."""
        partition = {"partition_index": 0}
        response = request(
            self.bootstrap(broker_id),
            55,
            2,
            {"topics": [{"topic_name": "__cluster_metadata", "partitions": [partition]}]},
        )
        assert response.error_code == NONE, response
        return int(response.topics[0].partitions[0].leader_id)

    def wait_controller(self, condition: Callable[[int], bool] = lambda _: True) -> int:
        """The active controller every live broker names, once they agree on one that
        meets `condition`."""
        found: list[int] = []

        def agreed() -> bool:
            ids = {self.quorum_leader(i) for i in self.live()}
            found[:] = list(ids)
            return len(ids) == 1 and found[0] in self.live() and condition(found[0])

        assert wait_until(agreed, WAIT_S), f"brokers name controllers {found}"
        return found[0]

    def partitions(self, broker_id: int, topic: str) -> dict[int, Any]:
        (described,) = self.metadata(broker_id, [topic]).topics
        assert described.error_code == NONE, described
        return {p.partition_index: p for p in described.partitions}

    def wait_partitions(
        self, topic: str, condition: Callable[[dict[int, Any]], bool], brokers: Iterable[int]
    ) -> dict[int, Any]:
        """The partitions as the first of `brokers` describes them, once every one of
        them describes partitions that meet `condition`."""
        ids = list(brokers)

        def holds() -> bool:
            try:
                return all(condition(self.partitions(i, topic)) for i in ids)
            except AssertionError:
                return False

        assert wait_until(holds, WAIT_S), self.partitions(ids[0], topic)
        return self.partitions(ids[0], topic)

    def log_dirs(self, broker_id: int, topic: str) -> list[str]:
        log_dir = self.brokers[broker_id].log_dir
        return sorted(p.name for p in log_dir.glob(f"{topic}-*") if p.is_dir())


@pytest.fixture
def cluster(cluster_factory: Callable[..., ClusterProcess]) -> Cluster:
    c = Cluster(cluster_factory(overrides=OVERRIDES))
    # Each broker applies the others' unfencing from the metadata log on its own time.
    assert wait_until(
        lambda: all(
            sorted(b.node_id for b in c.metadata(i).brokers) == list(BROKER_IDS) for i in BROKER_IDS
        ),
        WAIT_S,
    )
    return c


def create_topics(
    cluster: Cluster, broker_id: int, topics: list[dict[str, Any]], timeout_ms: int = 15000
) -> dict[str, Any]:
    response = request(
        cluster.bootstrap(broker_id),
        19,
        7,
        {"topics": topics, "timeout": datetime.timedelta(milliseconds=timeout_ms)},
    )
    return {t.name: t for t in response.topics}


def new_topic(
    name: str,
    partitions: int = -1,
    factor: int = -1,
    assignment: dict[int, list[int]] | None = None,
) -> dict[str, Any]:
    return {
        "name": name,
        "num_partitions": partitions,
        "replication_factor": factor,
        "assignments": [
            {"partition_index": p, "broker_ids": r} for p, r in (assignment or {}).items()
        ],
        "configs": [],
    }


def not_controller(cluster: Cluster, controller: int) -> int:
    return next(i for i in cluster.live() if i != controller)


# -- the controller --------------------------------------------------------------------


def test_every_broker_names_the_one_elected_controller(cluster: Cluster) -> None:
    controller = cluster.wait_controller()
    elected = [
        i for i, b in cluster.brokers.items() if "becoming the active controller" in b.log_text()
    ]
    assert elected == [controller]
    for i in BROKER_IDS:
        metadata = cluster.metadata(i)
        assert [b.node_id for b in metadata.brokers] == list(BROKER_IDS)
        assert all(b.port == cluster.brokers[b.node_id].port for b in metadata.brokers)
        # The controller a client sees is an alive broker, which forwards what it must.
        assert metadata.controller_id in BROKER_IDS
        described = request(cluster.bootstrap(i), 60, 1, {"endpoint_type": 1})
        assert described.error_code == NONE
        assert described.controller_id in BROKER_IDS
        assert sorted(b.broker_id for b in described.brokers) == list(BROKER_IDS)
    # librdkafka's view: a broker to send admin requests to.
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    assert admin.describe_cluster().result(10).controller.id in BROKER_IDS


def test_producer_ids_are_unique_across_brokers(cluster: Cluster) -> None:
    ids = []
    for _ in range(2):
        for i in BROKER_IDS:
            response = request(cluster.bootstrap(i), 22, 4, {"transaction_timeout": 60000})
            assert response.error_code == NONE
            ids.append(int(response.producer_id))
    assert len(set(ids)) == len(ids)
    # Each broker hands out ids from its own block of 1000, which the controller gave it
    # (AllocateProducerIds; Kafka's ProducerIdControlManager).
    blocks = {i: {pid // 1000 for pid in ids[k::3]} for k, i in enumerate(BROKER_IDS)}
    assert all(len(b) == 1 for b in blocks.values())
    assert len(set().union(*blocks.values())) == 3


def test_admin_apis_sent_to_any_broker_reach_the_controller(cluster: Cluster) -> None:
    """ElectLeaders and the reassignment APIs go to the active controller through the
    broker asked (KIP-590 forwarding), whichever broker that is."""
    controller = cluster.wait_controller()
    other = not_controller(cluster, controller)
    elect = request(
        cluster.bootstrap(other),
        43,
        2,
        {"election_type": 0, "topic_partitions": [{"topic": "t", "partitions": [0]}]},
    )
    assert elect.error_code == NONE
    ((result,),) = [r.partition_result for r in elect.replica_election_results]
    assert result.error_code == UNKNOWN_TOPIC_OR_PARTITION
    alter = request(
        cluster.bootstrap(other),
        45,
        0,
        {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "replicas": [1]}]}]},
    )
    assert alter.error_code == NONE
    assert [p.error_code for t in alter.responses for p in t.partitions] == [
        UNKNOWN_TOPIC_OR_PARTITION
    ]
    # Nothing is being reassigned, whichever broker is asked.
    for broker_id in (other, controller):
        listed = request(cluster.bootstrap(broker_id), 46, 0, {"topics": None})
        assert (listed.error_code, listed.topics) == (NONE, ())


# -- topics ----------------------------------------------------------------------------


def test_topics_created_from_any_broker_are_spread_over_the_cluster(cluster: Cluster) -> None:
    controller = cluster.wait_controller()
    other = not_controller(cluster, controller)
    created = create_topics(
        cluster,
        other,
        [
            new_topic("spread", partitions=6, factor=3),
            new_topic("placed", assignment={0: [3, 1], 1: [2, 3]}),
            new_topic("too-wide", partitions=1, factor=4),
        ],
    )
    assert created["spread"].error_code == NONE
    assert created["placed"].error_code == NONE
    assert created["too-wide"].error_code == INVALID_REPLICATION_FACTOR
    # Kafka's KRaft StripedReplicaPlacer message.
    assert created["too-wide"].error_message == (
        "Unable to replicate the partition 4 time(s): The target replication factor of 4 "
        "cannot be reached because only 3 broker(s) are registered."
    )
    # Every broker describes the same leaders and full ISRs, each broker leading two.
    partitions = cluster.wait_partitions(
        "spread",
        lambda ps: len(ps) == 6 and all(p.leader_id >= 0 for p in ps.values()),
        BROKER_IDS,
    )
    leaders = [p.leader_id for p in partitions.values()]
    assert sorted(leaders) == [1, 1, 2, 2, 3, 3]
    for p in partitions.values():
        assert sorted(p.replica_nodes) == [1, 2, 3]
        assert p.leader_id == p.replica_nodes[0] and sorted(p.isr_nodes) == [1, 2, 3]
    placed = cluster.wait_partitions(
        "placed", lambda ps: all(p.leader_id >= 0 for p in ps.values()), BROKER_IDS
    )
    assert {i: (list(p.replica_nodes), p.leader_id) for i, p in placed.items()} == {
        0: ([3, 1], 3),
        1: ([2, 3], 2),
    }
    # Each broker holds the replicas assigned to it, and no others.
    assert wait_until(lambda: all(len(cluster.log_dirs(i, "spread")) == 6 for i in BROKER_IDS), 10)
    assert cluster.log_dirs(1, "placed") == ["placed-0"]
    assert cluster.log_dirs(2, "placed") == ["placed-1"]


def test_partitions_and_configs_change_through_any_broker(cluster: Cluster) -> None:
    create_topics(cluster, 1, [new_topic("grown", partitions=2, factor=2)])
    cluster.wait_partitions("grown", lambda ps: len(ps) == 2, BROKER_IDS)
    response = request(
        cluster.bootstrap(2),
        37,
        3,
        {
            "topics": [{"name": "grown", "count": 4, "assignments": None}],
            "timeout": datetime.timedelta(seconds=15),
        },
    )
    assert [r.error_code for r in response.results] == [NONE]
    partitions = cluster.wait_partitions(
        "grown",
        lambda ps: len(ps) == 4 and all(p.leader_id >= 0 for p in ps.values()),
        BROKER_IDS,
    )
    assert all(len(p.replica_nodes) == 2 for p in partitions.values())
    altered = request(
        cluster.bootstrap(3),
        44,
        1,
        {
            "resources": [
                {
                    "resource_type": 2,
                    "resource_name": "grown",
                    "configs": [{"name": "retention.ms", "config_operation": 0, "value": "123456"}],
                }
            ]
        },
    )
    assert [r.error_code for r in altered.responses] == [NONE]

    def retention(broker_id: int) -> str | None:
        described = request(
            cluster.bootstrap(broker_id),
            32,
            4,
            {
                "resources": [
                    {
                        "resource_type": 2,
                        "resource_name": "grown",
                        "configuration_keys": ["retention.ms"],
                    }
                ]
            },
        )
        (resource,) = described.results
        return next(c.value for c in resource.configs if c.name == "retention.ms")

    assert wait_until(lambda: all(retention(i) == "123456" for i in BROKER_IDS), 10)


def test_deleted_topics_leave_no_replica_on_any_broker(cluster: Cluster) -> None:
    controller = cluster.wait_controller()
    created = create_topics(cluster, controller, [new_topic("doomed", partitions=3, factor=3)])
    assert created["doomed"].error_code == NONE
    assert wait_until(lambda: all(len(cluster.log_dirs(i, "doomed")) == 3 for i in BROKER_IDS), 10)
    other = not_controller(cluster, controller)
    response = request(
        cluster.bootstrap(other),
        20,
        6,
        {"topics": [{"name": "doomed"}], "timeout": datetime.timedelta(seconds=15)},
    )
    assert [r.error_code for r in response.responses] == [NONE]
    assert wait_until(lambda: all(not cluster.log_dirs(i, "doomed") for i in BROKER_IDS), 10)
    for i in BROKER_IDS:
        (described,) = cluster.metadata(i, ["doomed"]).topics
        assert described.error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION


def test_a_new_controller_takes_over_from_a_killed_one(cluster: Cluster) -> None:
    controller = cluster.wait_controller()
    cluster.brokers[controller].kill()
    successor = cluster.wait_controller(lambda c: c != controller)
    assert "becoming the active controller" in cluster.brokers[successor].log_text()
    # Once its session has expired, the killed broker is fenced and no longer given
    # replicas (Kafka places replicas on unfenced brokers only).
    cluster.process.wait_until_fenced(controller, timeout=WAIT_S)
    # The survivors are the cluster now: topics can be created again, through either.
    for i in cluster.live():
        name = f"after-{i}"
        created = create_topics(cluster, i, [new_topic(name, partitions=2, factor=2)])
        assert created[name].error_code == NONE, created[name]
        partitions = cluster.wait_partitions(
            name, lambda ps: all(p.leader_id >= 0 for p in ps.values()), cluster.live()
        )
        assert all(controller not in p.replica_nodes for p in partitions.values())


# -- leadership ------------------------------------------------------------------------


def test_a_sigtermed_broker_hands_its_leaderships_over_before_it_exits(
    cluster: Cluster,
) -> None:
    create_topics(cluster, 1, [new_topic("moved", partitions=3, factor=3)])
    before = cluster.wait_partitions(
        "moved", lambda ps: all(p.leader_id >= 0 for p in ps.values()), BROKER_IDS
    )
    victim = before[0].leader_id
    led = {i for i, p in before.items() if p.leader_id == victim}
    stopping = cluster.brokers[victim]
    assert stopping.stop(timeout=20) == 0
    log = stopping.log_text()
    # The controller answered should_shut_down once it had moved the leaderships away
    # (BrokerLifecycleManager's PENDING_CONTROLLED_SHUTDOWN -> SHUTTING_DOWN), while the
    # broker still ran: logged before it stopped serving.
    moved = "previous=PENDING_CONTROLLED_SHUTDOWN state=SHUTTING_DOWN"
    assert moved in log
    assert log.index(moved) < log.index("event=broker_stopped")
    survivors = list(cluster.live())
    after = cluster.partitions(survivors[0], "moved")
    for i in led:
        assert after[i].leader_id in survivors
        assert after[i].leader_epoch > before[i].leader_epoch
        assert victim not in after[i].isr_nodes


def test_elect_leaders_gives_leadership_back_to_the_preferred_replica(
    cluster: Cluster,
) -> None:
    create_topics(cluster, 1, [new_topic("pref", assignment={0: [1, 2, 3], 1: [2, 3, 1]})])
    cluster.wait_partitions("pref", lambda ps: ps[0].leader_id == 1, BROKER_IDS)
    # Broker 1 stops (controlled) and comes back: partition 0 is led elsewhere until the
    # preferred replica is elected again.
    cluster.brokers[1].restart()
    cluster.wait_partitions(
        "pref",
        lambda ps: ps[0].leader_id != 1 and sorted(ps[0].isr_nodes) == [1, 2, 3],
        BROKER_IDS,
    )
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    futures = admin.elect_leaders(
        ElectionType.PREFERRED, [CTopicPartition("pref", 0), CTopicPartition("pref", 1)]
    )
    results = futures.result(20)
    assert results[CTopicPartition("pref", 0)] is None
    not_needed = results[CTopicPartition("pref", 1)]
    assert not_needed is not None and not_needed.code() == KafkaError.ELECTION_NOT_NEEDED
    partitions = cluster.wait_partitions("pref", lambda ps: ps[0].leader_id == 1, BROKER_IDS)
    assert partitions[1].leader_id == 2


# -- reassignment ----------------------------------------------------------------------


def test_a_partition_moves_to_other_brokers(cluster: Cluster) -> None:
    create_topics(cluster, 1, [new_topic("moving", assignment={0: [1, 2]})])
    cluster.wait_partitions("moving", lambda ps: ps[0].leader_id == 1, BROKER_IDS)
    records = [Outgoing(0, f"v{i}".encode(), f"k{i}".encode()) for i in range(50)]
    produce("confluent", cluster.bootstrap(), "moving", records)
    controller = cluster.wait_controller()
    moved = {"partition_index": 0, "replicas": [2, 3]}
    response = request(
        cluster.bootstrap(controller),
        45,
        0,
        {"topics": [{"name": "moving", "partitions": [moved]}]},
    )
    assert response.error_code == NONE
    assert [p.error_code for t in response.responses for p in t.partitions] == [NONE]
    partitions = cluster.wait_partitions(
        "moving",
        lambda ps: list(ps[0].replica_nodes) == [2, 3] and sorted(ps[0].isr_nodes) == [2, 3],
        BROKER_IDS,
    )
    assert partitions[0].leader_id == 2
    listed = request(cluster.bootstrap(controller), 46, 0, {"topics": None})
    assert (listed.error_code, listed.topics) == (NONE, ())
    # Broker 1 deleted its replica; broker 3 holds every record.
    assert wait_until(lambda: not cluster.log_dirs(1, "moving"), 10)
    assert cluster.log_dirs(3, "moving") == ["moving-0"]
    consumed = consume("confluent", cluster.bootstrap(3), "moving", len(records))
    assert consumed.values() == [r.value for r in records]


# -- group coordination ----------------------------------------------------------------


def commit_offsets(bootstrap: str, group: str, partitions: list[CTopicPartition]) -> None:
    """AlterConsumerGroupOffsets until the coordinator acknowledges every partition.

    librdkafka hands OffsetCommit's per-partition errors back as they came, where Kafka's
    AdminClient retries the retriable ones: a broker that FindCoordinator names (from the
    answering broker's metadata) may not have applied its leadership of the group's
    __consumer_offsets partition yet, and answers NOT_COORDINATOR, as Kafka's would. Any
    other error fails the test."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    errors: list[KafkaError] = []

    def acknowledged() -> bool:
        request = ConsumerGroupTopicPartitions(group, partitions)
        result = admin.alter_consumer_group_offsets([request])[group].result(WAIT_S)
        errors[:] = [tp.error for tp in result.topic_partitions if tp.error is not None]
        assert all(e.code() in RETRIABLE_COMMIT_ERRORS for e in errors), errors
        return not errors

    assert wait_until(acknowledged, WAIT_S), errors


def test_group_coordination_fails_over_with_consumer_offsets_leadership(
    cluster: Cluster,
) -> None:
    create_topics(cluster, 1, [new_topic("orders", partitions=1, factor=3)])
    group = "failover-group"
    commit_offsets(cluster.bootstrap(), group, [CTopicPartition("orders", 0, 42)])
    offsets = request(cluster.bootstrap(1), 10, 4, {"key_type": 0, "coordinator_keys": [group]})
    (found,) = offsets.coordinators
    assert found.error_code == NONE
    coordinator = found.node_id
    # Every broker is in the ISR from the creation on: the commit, acknowledged only once
    # written with acks=-1, is on each of them. Nothing waits for followers to fetch: the
    # acknowledgement alone must make it survive the coordinator.
    partitions = cluster.wait_partitions(
        "__consumer_offsets",
        lambda ps: all(sorted(p.isr_nodes) == [1, 2, 3] for p in ps.values()),
        BROKER_IDS,
    )
    assert all(sorted(p.replica_nodes) == [1, 2, 3] for p in partitions.values())
    cluster.brokers[coordinator].kill()
    survivor = next(iter(cluster.live()))

    def new_coordinator() -> bool:
        response = request(
            cluster.bootstrap(survivor), 10, 4, {"key_type": 0, "coordinator_keys": [group]}
        )
        (c,) = response.coordinators
        return c.error_code == NONE and c.node_id != coordinator

    assert wait_until(new_coordinator, WAIT_S)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})

    def offsets_survived() -> bool:
        try:
            request_group = ConsumerGroupTopicPartitions(group, [CTopicPartition("orders", 0)])
            result = admin.list_consumer_group_offsets([request_group])[group].result(10)
        except KafkaException:
            return False
        return [tp.offset for tp in result.topic_partitions] == [42]

    assert wait_until(offsets_survived, WAIT_S)
