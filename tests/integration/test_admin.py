"""Topic administration through the admin APIs of librdkafka, kafka-python and aiokafka.

Every client creates topics (partition counts, broker defaults, configs, explicit
replica assignments, validate_only), meets Kafka's errors for bad requests, lists and
deletes topics (a deleted topic is gone and comes back empty), describes configs with
their sources and the cluster. Config changes — incremental and legacy — survive a
restart and take effect: a lowered max.message.bytes refuses larger records.
Metadata requests auto-create topics only when the broker and the client allow it.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import aiokafka.admin
import aiokafka.errors
import kafka
import kafka.admin
import kafka.errors
import pytest
from aiokafka.admin.config_resource import ConfigResource as AioConfigResource
from aiokafka.admin.config_resource import ConfigResourceType as AioConfigResourceType
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from support.broker import BrokerProcess
from support.clients import (
    CLIENTS,
    Outgoing,
    consume,
    produce,
    running_broker,
    wait_until,
    watermarks,
)

# Kafka's error codes.
NONE: Final = 0
UNKNOWN_TOPIC_OR_PARTITION: Final = 3
INVALID_TOPIC_EXCEPTION: Final = 17
TOPIC_ALREADY_EXISTS: Final = 36
INVALID_PARTITIONS: Final = 37
INVALID_REPLICATION_FACTOR: Final = 38
INVALID_REPLICA_ASSIGNMENT: Final = 39
INVALID_CONFIG: Final = 40
# Kafka's ConfigSource ids and names.
SOURCES: Final = {
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
}
BROKER_OVERRIDES: Final = {"log.retention.ms": 7_200_000, "num.partitions": 2}


@dataclass(frozen=True, slots=True)
class TopicSpec:
    name: str
    partitions: int = -1
    replication: int = -1
    assignment: dict[int, list[int]] | None = None
    configs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Cluster:
    cluster_id: str
    controller_id: int
    brokers: list[tuple[int, str, int]]


class Admin(abc.ABC):
    """One client's admin API, normalised: error codes as Kafka's numbers, config
    sources as Kafka's names."""

    @abc.abstractmethod
    def create(self, topics: list[TopicSpec], validate_only: bool = False) -> dict[str, int]:
        """Topic name -> error code."""

    @abc.abstractmethod
    def list_topics(self) -> dict[str, int]:
        """Topic name -> partition count."""

    @abc.abstractmethod
    def describe_topic(self, name: str) -> dict[str, tuple[str | None, str]]:
        """Config name -> (value, source)."""

    @abc.abstractmethod
    def delete(self, names: list[str]) -> dict[str, int]:
        """Topic name -> error code."""

    @abc.abstractmethod
    def describe_cluster(self) -> Cluster: ...

    @abc.abstractmethod
    def alter(self, name: str, configs: dict[str, str]) -> int:
        """Set ``configs`` on a topic, each client its own way (see the subclasses)."""

    @abc.abstractmethod
    def close(self) -> None: ...


class ConfluentAdmin(Admin):
    def __init__(self, bootstrap: str) -> None:
        self.client = AdminClient({"bootstrap.servers": bootstrap})

    @staticmethod
    def _code(future: Any) -> int:
        try:
            future.result(20)
        except KafkaException as e:
            return int(e.args[0].code())
        return NONE

    def create(self, topics: list[TopicSpec], validate_only: bool = False) -> dict[str, int]:
        new = []
        for t in topics:
            if t.assignment is not None:
                ordered = [t.assignment[p] for p in sorted(t.assignment)]
                new.append(
                    NewTopic(t.name, len(ordered), replica_assignment=ordered, config=t.configs)
                )
            else:
                new.append(NewTopic(t.name, t.partitions, t.replication, config=t.configs))
        futures = self.client.create_topics(new, operation_timeout=10, validate_only=validate_only)
        return {name: self._code(f) for name, f in futures.items()}

    def list_topics(self) -> dict[str, int]:
        topics = self.client.list_topics(timeout=10).topics
        return {name: len(t.partitions) for name, t in topics.items()}

    def describe_topic(self, name: str) -> dict[str, tuple[str | None, str]]:
        futures = self.client.describe_configs([ConfigResource(ResourceType.TOPIC, name)])
        entries = next(iter(futures.values())).result(10)
        return {k: (e.value, SOURCES[int(e.source)]) for k, e in entries.items()}

    def delete(self, names: list[str]) -> dict[str, int]:
        futures = self.client.delete_topics(names, operation_timeout=10)
        return {name: self._code(f) for name, f in futures.items()}

    def describe_cluster(self) -> Cluster:
        cluster = self.client.describe_cluster(request_timeout=10).result(10)
        return Cluster(
            cluster.cluster_id,
            cluster.controller.id,
            [(n.id, n.host, n.port) for n in cluster.nodes],
        )

    def alter(self, name: str, configs: dict[str, str]) -> int:
        """IncrementalAlterConfigs SET."""
        return self.incremental(
            name,
            [
                ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                for k, v in configs.items()
            ],
        )

    def incremental(
        self, name: str, entries: list[ConfigEntry], validate_only: bool = False
    ) -> int:
        resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=entries)
        futures = self.client.incremental_alter_configs([resource], validate_only=validate_only)
        return self._code(next(iter(futures.values())))

    def close(self) -> None:
        """Nothing to do: librdkafka releases the client when it is collected."""

    def create_partitions(
        self,
        name: str,
        count: int,
        assignment: list[list[int]] | None = None,
        validate_only: bool = False,
    ) -> int:
        new = NewPartitions(name, count, assignment) if assignment else NewPartitions(name, count)
        futures = self.client.create_partitions(
            [new], operation_timeout=3, validate_only=validate_only
        )
        return self._code(futures[name])


class KafkaPythonAdmin(Admin):
    def __init__(self, bootstrap: str) -> None:
        self.client = kafka.KafkaAdminClient(bootstrap_servers=bootstrap)

    def create(self, topics: list[TopicSpec], validate_only: bool = False) -> dict[str, int]:
        new = [
            kafka.admin.NewTopic(
                t.name,
                t.partitions,
                t.replication,
                replica_assignments=t.assignment,
                topic_configs=t.configs,
            )
            for t in topics
        ]
        response = self.client.create_topics(
            new, timeout_ms=10_000, validate_only=validate_only, raise_errors=False
        )
        return {t["name"]: t["error_code"] for t in response["topics"]}

    def list_topics(self) -> dict[str, int]:
        return {t["name"]: len(t["partitions"]) for t in self.client.describe_topics()}

    def describe_topic(self, name: str) -> dict[str, tuple[str | None, str]]:
        result = self.client.describe_configs(
            [kafka.admin.ConfigResource("TOPIC", name)], config_filter="all"
        )
        entries = result["topic"][name]
        return {k: (e["value"], e["config_source"]) for k, e in entries.items()}

    def delete(self, names: list[str]) -> dict[str, int]:
        response = self.client.delete_topics(names, timeout_ms=10_000, raise_errors=False)
        return {t["name"]: t["error_code"] for t in response["topics"]}

    def describe_cluster(self) -> Cluster:
        cluster = self.client.describe_cluster()
        return Cluster(
            cluster["cluster_id"],
            cluster["controller_id"],
            [(b["broker_id"], b["host"], b["port"]) for b in cluster["brokers"]],
        )

    def alter(self, name: str, configs: dict[str, str]) -> int:
        """kafka-python picks IncrementalAlterConfigs when the broker has it."""
        try:
            self.client.alter_configs(
                [kafka.admin.ConfigResource("TOPIC", name, configs=dict(configs))],
                raise_on_unknown=False,
            )
        except kafka.errors.KafkaError as e:
            return int(e.errno)
        return NONE

    def close(self) -> None:
        self.client.close()


class AioAdmin(Admin):
    """aiokafka on a private event loop, one call at a time."""

    def __init__(self, bootstrap: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.client = self._run(self._start(bootstrap))

    @staticmethod
    async def _start(bootstrap: str) -> aiokafka.admin.AIOKafkaAdminClient:
        # The client binds to the running loop when it is built.
        client = aiokafka.admin.AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await client.start()
        return client

    def _run(self, coroutine: Any) -> Any:
        return self.loop.run_until_complete(asyncio.wait_for(coroutine, 20))

    def create(self, topics: list[TopicSpec], validate_only: bool = False) -> dict[str, int]:
        new = []
        for t in topics:
            topic = aiokafka.admin.NewTopic(
                t.name,
                1 if t.assignment is None else -1,
                1 if t.assignment is None else -1,
                replica_assignments=t.assignment,
                topic_configs=t.configs,
            )
            # aiokafka's NewTopic insists on counts or an assignment, but CreateTopics
            # (v4+) also takes -1/-1 for the broker's defaults.
            topic.num_partitions, topic.replication_factor = t.partitions, t.replication
            new.append(topic)
        response = self._run(
            self.client.create_topics(new, timeout_ms=10_000, validate_only=validate_only)
        )
        return {name: code for name, code, *_ in response.topic_errors}

    def list_topics(self) -> dict[str, int]:
        topics = self._run(self.client.describe_topics())
        return {t["topic"]: len(t["partitions"]) for t in topics}

    def describe_topic(self, name: str) -> dict[str, tuple[str | None, str]]:
        resource = AioConfigResource(AioConfigResourceType.TOPIC, name)
        (response,) = self._run(self.client.describe_configs([resource]))
        ((error_code, _, _, _, entries),) = response.resources
        assert error_code == NONE
        return {e[0]: (e[1], SOURCES[e[3]]) for e in entries}

    def delete(self, names: list[str]) -> dict[str, int]:
        response = self._run(self.client.delete_topics(names, timeout_ms=10_000))
        return {name: code for name, code, *_ in response.topic_error_codes}

    def describe_cluster(self) -> Cluster:
        cluster = self._run(self.client.describe_cluster())
        return Cluster(
            cluster["cluster_id"],
            cluster["controller_id"],
            [(b["node_id"], b["host"], b["port"]) for b in cluster["brokers"]],
        )

    def alter(self, name: str, configs: dict[str, str]) -> int:
        """aiokafka has only the legacy AlterConfigs: it replaces all overrides."""
        resource = AioConfigResource(AioConfigResourceType.TOPIC, name, configs=dict(configs))
        (response,) = self._run(self.client.alter_configs([resource]))
        ((error_code, *_),) = response.resources
        return int(error_code)

    def close(self) -> None:
        self._run(self.client.close())
        self.loop.close()


ADMINS: Final[dict[str, Callable[[str], Admin]]] = {
    "confluent": ConfluentAdmin,
    "kafka-python": KafkaPythonAdmin,
    "aiokafka": AioAdmin,
}


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data_dir = tmp_path_factory.mktemp("admin")
    with running_broker(data_dir, BROKER_OVERRIDES) as broker:
        yield broker


@pytest.fixture(params=CLIENTS)
def admin(request: pytest.FixtureRequest, shared: BrokerProcess) -> Iterator[Admin]:
    client = ADMINS[request.param](shared.bootstrap)
    yield client
    client.close()


def _prefix(admin: Admin) -> str:
    return {ConfluentAdmin: "rdk", KafkaPythonAdmin: "kp", AioAdmin: "aio"}[type(admin)]


def _cluster_id(broker: BrokerProcess) -> str:
    meta = (broker.log_dir / "meta.properties").read_text().splitlines()
    return next(line.split("=", 1)[1] for line in meta if line.startswith("cluster.id="))


# -- create, list, describe, delete ------------------------------------------------------


def test_create_topics_with_partitions_defaults_configs_and_assignment(
    shared: BrokerProcess, admin: Admin
) -> None:
    p = _prefix(admin)
    codes = admin.create(
        [
            TopicSpec(f"{p}-three", 3, 1, configs={"retention.ms": "3600000"}),
            TopicSpec(f"{p}-defaults"),
            TopicSpec(f"{p}-assigned", assignment={0: [1], 1: [1], 2: [1], 3: [1]}),
        ]
    )
    assert codes == {f"{p}-three": NONE, f"{p}-defaults": NONE, f"{p}-assigned": NONE}
    topics = admin.list_topics()
    assert topics[f"{p}-three"] == 3
    assert topics[f"{p}-defaults"] == BROKER_OVERRIDES["num.partitions"]
    assert topics[f"{p}-assigned"] == 4

    three = admin.describe_topic(f"{p}-three")
    assert three["retention.ms"] == ("3600000", "DYNAMIC_TOPIC_CONFIG")
    assert three["segment.bytes"] == ("1073741824", "DEFAULT_CONFIG")
    assert three["max.message.bytes"] == ("1048588", "DEFAULT_CONFIG")
    defaults = admin.describe_topic(f"{p}-defaults")
    assert defaults["retention.ms"] == ("7200000", "STATIC_BROKER_CONFIG")
    assert defaults["cleanup.policy"] == ("delete", "DEFAULT_CONFIG")

    # Every partition has a leader and takes records.
    records = [Outgoing(i, b"p%d" % i) for i in range(4)]
    delivered = produce("confluent", shared.bootstrap, f"{p}-assigned", records)
    assert [(d.partition, d.offset) for d in delivered] == [(i, 0) for i in range(4)]


def test_validate_only_creates_nothing(admin: Admin) -> None:
    p = _prefix(admin)
    name = f"{p}-validated"
    assert admin.create([TopicSpec(name, 2, 1)], validate_only=True) == {name: NONE}
    assert name not in admin.list_topics()
    # Validation still reports errors.
    bad = admin.create(
        [TopicSpec(f"{p}-bad-config", 1, 1, configs={"retention.ms": "soon"})], validate_only=True
    )
    assert bad == {f"{p}-bad-config": INVALID_CONFIG}
    assert admin.create([TopicSpec(name, 2, 1)]) == {name: NONE}
    assert admin.create([TopicSpec(name, 2, 1)], validate_only=True) == {name: TOPIC_ALREADY_EXISTS}


def test_create_topic_errors(admin: Admin) -> None:
    p = _prefix(admin)
    assert admin.create([TopicSpec(f"{p}-exists", 1, 1), TopicSpec(f"{p}_collides", 1, 1)]) == {
        f"{p}-exists": NONE,
        f"{p}_collides": NONE,
    }
    cases = {
        TopicSpec(f"{p}-exists", 1, 1).name: TOPIC_ALREADY_EXISTS,
        f"{p}-zero-partitions": INVALID_PARTITIONS,
        f"{p}-replication-two": INVALID_REPLICATION_FACTOR,
        f"{p}-zero-replicas": INVALID_REPLICATION_FACTOR,
        f"{p}/slash": INVALID_TOPIC_EXCEPTION,
        "..": INVALID_TOPIC_EXCEPTION,
        f"{p}-" + "x" * 250: INVALID_TOPIC_EXCEPTION,
        f"{p}.collides": INVALID_TOPIC_EXCEPTION,
        f"{p}-bad-value": INVALID_CONFIG,
        f"{p}-unknown-config": INVALID_CONFIG,
        f"{p}-preallocate": INVALID_CONFIG,  # not implemented, so refused
        f"{p}-unknown-broker": INVALID_REPLICA_ASSIGNMENT,
        f"{p}-good": NONE,
    }
    specs = [
        TopicSpec(f"{p}-exists", 1, 1),
        TopicSpec(f"{p}-zero-partitions", 0, 1),
        TopicSpec(f"{p}-replication-two", 1, 2),
        TopicSpec(f"{p}-zero-replicas", 1, 0),
        TopicSpec(f"{p}/slash", 1, 1),
        TopicSpec("..", 1, 1),
        TopicSpec(f"{p}-" + "x" * 250, 1, 1),
        TopicSpec(f"{p}.collides", 1, 1),
        TopicSpec(f"{p}-bad-value", 1, 1, configs={"retention.ms": "abc"}),
        TopicSpec(f"{p}-unknown-config", 1, 1, configs={"no.such.config": "1"}),
        TopicSpec(f"{p}-preallocate", 1, 1, configs={"preallocate": "true"}),
        TopicSpec(f"{p}-unknown-broker", assignment={0: [2]}),
        TopicSpec(f"{p}-good", 1, 1),
    ]
    assert admin.create(specs) == cases
    topics = admin.list_topics()
    assert f"{p}-good" in topics
    assert not {
        name for name, code in cases.items() if code not in (NONE, TOPIC_ALREADY_EXISTS)
    } & set(topics)


def test_delete_topic_then_recreate_it_empty(shared: BrokerProcess, admin: Admin) -> None:
    p = _prefix(admin)
    name = f"{p}-doomed"
    assert admin.create([TopicSpec(name, 2, 1, configs={"retention.bytes": "100000"})]) == {
        name: NONE
    }
    produce(
        "confluent", shared.bootstrap, name, [Outgoing(i % 2, b"old-%d" % i) for i in range(10)]
    )
    assert watermarks(shared.bootstrap, name, 0) == (0, 5)

    assert admin.delete([name, f"{p}-never-existed"]) == {
        name: NONE,
        f"{p}-never-existed": UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert name not in admin.list_topics()
    # The replicas' directories are renamed "<dir>.<id>-delete", then removed.
    assert wait_until(lambda: not list(shared.log_dir.glob(f"{name}-*")), 10), (
        "partition directories are left behind"
    )

    assert admin.create([TopicSpec(name, 1, 1)]) == {name: NONE}
    assert admin.list_topics()[name] == 1
    assert admin.describe_topic(name)["retention.bytes"] == ("-1", "DEFAULT_CONFIG")
    assert watermarks(shared.bootstrap, name, 0) == (0, 0)
    delivered = produce("kafka-python", shared.bootstrap, name, [Outgoing(0, b"new")])
    assert delivered[0].offset == 0
    assert consume("aiokafka", shared.bootstrap, name, 1).values() == [b"new"]


def test_describe_cluster(shared: BrokerProcess, admin: Admin) -> None:
    cluster = admin.describe_cluster()
    assert cluster.cluster_id == _cluster_id(shared)
    assert cluster.controller_id == 1
    assert cluster.brokers == [(1, "127.0.0.1", shared.port)]


def test_describe_broker_configs(shared: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": shared.bootstrap})
    futures = admin.describe_configs([ConfigResource(ResourceType.BROKER, "1")])
    entries = next(iter(futures.values())).result(10)
    assert entries["log.retention.ms"].value == "7200000"
    assert SOURCES[int(entries["log.retention.ms"].source)] == "STATIC_BROKER_CONFIG"
    assert entries["num.partitions"].value == "2"
    assert entries["message.max.bytes"].value == "1048588"
    assert SOURCES[int(entries["message.max.bytes"].source)] == "DEFAULT_CONFIG"
    assert entries["log.dirs"].value == str(shared.log_dir)
    unknown = admin.describe_configs([ConfigResource(ResourceType.TOPIC, "no-such-topic")])
    with pytest.raises(KafkaException, match="UNKNOWN_TOPIC_OR_PART"):
        next(iter(unknown.values())).result(10)


# -- create partitions -------------------------------------------------------------------


def test_create_partitions_grows_a_topic(shared: BrokerProcess) -> None:
    admin = ConfluentAdmin(shared.bootstrap)
    name = "grown"
    assert admin.create([TopicSpec(name, 1, 1)]) == {name: NONE}
    assert admin.create_partitions(name, 3) == NONE
    assert admin.create_partitions(name, 5, [[1], [1]]) == NONE
    assert admin.list_topics()[name] == 5
    delivered = produce("confluent", shared.bootstrap, name, [Outgoing(p, b"p") for p in range(5)])
    assert [(d.partition, d.offset) for d in delivered] == [(p, 0) for p in range(5)]


def test_create_partitions_errors(shared: BrokerProcess) -> None:
    admin = ConfluentAdmin(shared.bootstrap)
    name = "not-grown"
    assert admin.create([TopicSpec(name, 2, 1)]) == {name: NONE}
    assert admin.create_partitions(name, 4, validate_only=True) == NONE
    assert admin.create_partitions(name, 1) == INVALID_PARTITIONS
    assert admin.create_partitions(name, 2) == INVALID_PARTITIONS
    assert admin.create_partitions(name, 4, [[1]]) == INVALID_REPLICA_ASSIGNMENT
    assert admin.create_partitions(name, 3, [[2]]) == INVALID_REPLICA_ASSIGNMENT
    assert admin.create_partitions("no-such-topic", 3) == UNKNOWN_TOPIC_OR_PARTITION
    assert admin.list_topics()[name] == 2


# -- config changes ----------------------------------------------------------------------


# What `_produce_sized` returns when the broker refuses the record with TOO_LARGE.
TOO_LARGE: Final = -1


def _produce_sized(client: str, bootstrap: str, topic: str, size: int) -> int:
    """Produce one record of ``size`` bytes; its offset, or TOO_LARGE."""
    config: dict[str, Any] = {
        "confluent": {"message.timeout.ms": 5000},
        "kafka-python": {"retries": 0},
        "aiokafka": {},
    }[client]
    try:
        return produce(client, bootstrap, topic, [Outgoing(0, b"m" * size)], config)[0].offset
    except AssertionError as e:
        assert "MSG_SIZE_TOO_LARGE" in str(e), e
        return TOO_LARGE
    except (kafka.errors.MessageSizeTooLargeError, aiokafka.errors.MessageSizeTooLargeError):
        return TOO_LARGE


def test_config_changes_take_effect_and_survive_a_restart(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory()
    rdk = ConfluentAdmin(broker.bootstrap)
    name = "altered"
    assert rdk.create([TopicSpec(name, 1, 1)]) == {name: NONE}
    assert _produce_sized("confluent", broker.bootstrap, name, 5000) == 0

    # Incremental (librdkafka): SET, validate_only, errors.
    assert rdk.alter(name, {"max.message.bytes": "2000", "retention.ms": "86400000"}) == NONE
    assert (
        rdk.incremental(
            name,
            [ConfigEntry("segment.bytes", "100000", incremental_operation=AlterConfigOpType.SET)],
            validate_only=True,
        )
        == NONE
    )
    assert rdk.alter(name, {"retention.ms": "forever"}) == INVALID_CONFIG
    assert rdk.alter(name, {"no.such.config": "1"}) == INVALID_CONFIG
    assert rdk.alter(name, {"preallocate": "true"}) == INVALID_CONFIG
    assert rdk.alter("no-such-topic", {"retention.ms": "1000"}) == UNKNOWN_TOPIC_OR_PARTITION
    described = rdk.describe_topic(name)
    assert described["max.message.bytes"] == ("2000", "DYNAMIC_TOPIC_CONFIG")
    assert described["retention.ms"] == ("86400000", "DYNAMIC_TOPIC_CONFIG")
    assert described["segment.bytes"] == ("1073741824", "DEFAULT_CONFIG")
    assert _produce_sized("confluent", broker.bootstrap, name, 5000) == TOO_LARGE
    assert _produce_sized("aiokafka", broker.bootstrap, name, 1000) == 1

    broker.restart()
    rdk = ConfluentAdmin(broker.bootstrap)
    assert rdk.describe_topic(name)["max.message.bytes"] == ("2000", "DYNAMIC_TOPIC_CONFIG")
    assert _produce_sized("kafka-python", broker.bootstrap, name, 5000) == TOO_LARGE
    assert _produce_sized("confluent", broker.bootstrap, name, 1000) == 2

    # kafka-python (incremental when the broker has it) raises the limit again.
    kp = KafkaPythonAdmin(broker.bootstrap)
    assert kp.alter(name, {"max.message.bytes": "10000"}) == NONE
    kp.close()
    assert _produce_sized("aiokafka", broker.bootstrap, name, 5000) == 3
    assert rdk.describe_topic(name)["retention.ms"] == ("86400000", "DYNAMIC_TOPIC_CONFIG")

    # List operations and DELETE.
    assert (
        rdk.incremental(
            name,
            [
                ConfigEntry(
                    "cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND
                )
            ],
        )
        == NONE
    )
    assert rdk.describe_topic(name)["cleanup.policy"] == ("delete,compact", "DYNAMIC_TOPIC_CONFIG")
    assert (
        rdk.incremental(
            name,
            [
                ConfigEntry(
                    "cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT
                ),
                ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
            ],
        )
        == NONE
    )
    described = rdk.describe_topic(name)
    assert described["cleanup.policy"] == ("compact", "DYNAMIC_TOPIC_CONFIG")
    assert described["retention.ms"] == ("604800000", "DEFAULT_CONFIG")
    assert (
        rdk.incremental(
            name,
            [ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.APPEND)],
        )
        == INVALID_CONFIG
    )

    # Legacy AlterConfigs (aiokafka) replaces the whole set: the other overrides go.
    aio = AioAdmin(broker.bootstrap)
    assert aio.alter(name, {"retention.bytes": "123456789"}) == NONE
    aio.close()
    described = rdk.describe_topic(name)
    assert described["retention.bytes"] == ("123456789", "DYNAMIC_TOPIC_CONFIG")
    assert described["max.message.bytes"] == ("1048588", "DEFAULT_CONFIG")
    assert described["cleanup.policy"] == ("delete", "DEFAULT_CONFIG")

    broker.restart()
    rdk = ConfluentAdmin(broker.bootstrap)
    described = rdk.describe_topic(name)
    assert described["retention.bytes"] == ("123456789", "DYNAMIC_TOPIC_CONFIG")
    assert described["max.message.bytes"] == ("1048588", "DEFAULT_CONFIG")
    assert consume("confluent", broker.bootstrap, name, 4).values() == [
        b"m" * 5000,
        b"m" * 1000,
        b"m" * 1000,
        b"m" * 5000,
    ]


def test_broker_configs_cannot_be_altered(shared: BrokerProcess) -> None:
    """Tiercel has no dynamic broker configs: altering one is an INVALID_REQUEST."""
    admin = AdminClient({"bootstrap.servers": shared.bootstrap})
    resource = ConfigResource(
        ResourceType.BROKER,
        "1",
        incremental_configs=[
            ConfigEntry("log.retention.ms", "1", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    with pytest.raises(KafkaException, match="INVALID_REQUEST"):
        next(iter(admin.incremental_alter_configs([resource]).values())).result(10)


# -- auto-creation through Metadata ------------------------------------------------------


@pytest.mark.parametrize("client", CLIENTS)
def test_producing_auto_creates_a_topic(shared: BrokerProcess, client: str) -> None:
    name = f"auto-created-by-{client}"
    delivered = produce(client, shared.bootstrap, name, [Outgoing(0, b"first")])
    assert delivered[0].offset == 0
    topics = ConfluentAdmin(shared.bootstrap).list_topics()
    assert topics[name] == BROKER_OVERRIDES["num.partitions"]
    assert consume("confluent", shared.bootstrap, name, 1).values() == [b"first"]


def test_consumer_metadata_does_not_auto_create(shared: BrokerProcess) -> None:
    """librdkafka consumers ask Metadata not to create topics (allow.auto.create.topics
    is false for them): the topic is unknown and stays so."""
    consumer = Consumer({"bootstrap.servers": shared.bootstrap, "group.id": "no-auto"})
    try:
        metadata = consumer.list_topics("consumer-only", timeout=10)
    finally:
        consumer.close()
    assert metadata.topics["consumer-only"].error.code() == UNKNOWN_TOPIC_OR_PARTITION
    assert "consumer-only" not in ConfluentAdmin(shared.bootstrap).list_topics()


def test_metadata_for_an_invalid_name_is_invalid_topic(shared: BrokerProcess) -> None:
    producer = Producer({"bootstrap.servers": shared.bootstrap})
    metadata = producer.list_topics("bad$name", timeout=10)
    assert metadata.topics["bad$name"].error.code() == INVALID_TOPIC_EXCEPTION


def test_no_auto_creation_when_disabled(broker_factory: Callable[..., BrokerProcess]) -> None:
    broker = broker_factory({"auto.create.topics.enable": "false"})
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    metadata = producer.list_topics("not-created", timeout=10)
    assert metadata.topics["not-created"].error.code() == UNKNOWN_TOPIC_OR_PARTITION
    kp = kafka.KafkaProducer(
        bootstrap_servers=broker.bootstrap, enable_idempotence=False, max_block_ms=1500
    )
    with pytest.raises(kafka.errors.KafkaTimeoutError):
        kp.send("not-created-either", b"v")
    kp.close(1)
    topics = ConfluentAdmin(broker.bootstrap).list_topics()
    assert "not-created" not in topics
    assert "not-created-either" not in topics
