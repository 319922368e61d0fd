"""Paths and JSON documents of Kafka's ZooKeeper layout, which the MetadataStore holds.

    /cluster/id                                {"version":"1","id":"<cluster id>"}
    /brokers/ids/<id>          (ephemeral)     {"version":5,"host":..,"port":..,"endpoints":[..],
                                                "listener_security_protocol_map":{..},"rack":null,..}
    /brokers/topics/<topic>                    {"version":3,"topic_id":"<uuid>",
                                                "partitions":{"0":[1,2,3],..},
                                                "adding_replicas":{"0":[4]},
                                                "removing_replicas":{"0":[3]}}
    /brokers/topics/<topic>/partitions/<p>/state
                                               {"version":1,"controller_epoch":1,"leader":1,
                                                "leader_epoch":0,"isr":[1,2,3],
                                                "leader_recovery_state":0}
    /config/topics/<topic>                     {"version":1,"config":{"retention.ms":"1000"}}
    /admin/delete_topics/<topic>               (empty: a deletion request)
    /admin/controlled_shutdown/<id> (ephemeral) (empty: broker <id> is shutting down; Kafka
                                                sent an RPC, Tiercel asks through the store)
    /controller                (ephemeral)     {"version":2,"brokerid":1,"timestamp":"..",
                                                "kraftControllerEpoch":-1}
    /controller_epoch                          "1"

An operator who knows Kafka's ZooKeeper mode reads these with zkCli unchanged.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Final

from tiercel.config.broker_config import Listener
from tiercel.server.partition import PartitionState
from tiercel.storage.checkpoint_file import kafka_str_to_uuid, uuid_to_kafka_str

CLUSTER_ID_PATH: Final = "/cluster/id"
BROKER_IDS_PATH: Final = "/brokers/ids"
TOPICS_PATH: Final = "/brokers/topics"
TOPIC_CONFIGS_PATH: Final = "/config/topics"
DELETE_TOPICS_PATH: Final = "/admin/delete_topics"
CONTROLLED_SHUTDOWN_PATH: Final = "/admin/controlled_shutdown"
CONTROLLER_PATH: Final = "/controller"
CONTROLLER_EPOCH_PATH: Final = "/controller_epoch"
PERSISTENT_PATHS: Final = (
    "/cluster",
    BROKER_IDS_PATH,
    TOPICS_PATH,
    "/config",
    TOPIC_CONFIGS_PATH,
    "/admin",
    DELETE_TOPICS_PATH,
    CONTROLLED_SHUTDOWN_PATH,
)


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS_PATH}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS_PATH}/{topic}"


def partition_path(topic: str, partition: int) -> str:
    return f"{TOPICS_PATH}/{topic}/partitions/{partition}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{partition_path(topic, partition)}/state"


def topic_config_path(topic: str) -> str:
    return f"{TOPIC_CONFIGS_PATH}/{topic}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS_PATH}/{topic}"


def controlled_shutdown_path(broker_id: int) -> str:
    return f"{CONTROLLED_SHUTDOWN_PATH}/{broker_id}"


def _dumps(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def _loads(data: bytes) -> dict[str, Any]:
    doc = json.loads(data)
    if not isinstance(doc, dict):
        raise ValueError(f"expected a JSON object, got {data[:60]!r}")
    return doc


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    broker_id: int
    endpoints: tuple[Listener, ...]
    rack: str | None = None

    def endpoint(self, listener_name: str) -> Listener | None:
        for endpoint in self.endpoints:
            if endpoint.name == listener_name:
                return endpoint
        return None

    def encode(self) -> bytes:
        first = self.endpoints[0]
        return _dumps(
            {
                "version": 5,
                "host": first.host,
                "port": first.port,
                "endpoints": [f"{e.name}://{e.host}:{e.port}" for e in self.endpoints],
                "listener_security_protocol_map": {e.name: "PLAINTEXT" for e in self.endpoints},
                "jmx_port": -1,
                "features": {},
                "rack": self.rack,
                "timestamp": str(int(time.time() * 1000)),
            }
        )

    @classmethod
    def decode(cls, broker_id: int, data: bytes) -> BrokerRegistration:
        doc = _loads(data)
        endpoints = []
        for text in doc.get("endpoints", []):
            name, _, address = text.partition("://")
            host, _, port = address.rpartition(":")
            endpoints.append(Listener(name, host, int(port)))
        return cls(broker_id, tuple(endpoints), doc.get("rack"))


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    """A topic's replicas per partition. During a reassignment `partitions` holds the full
    replica set (target and original replicas) and the two other maps the replicas being
    added and removed (KIP-455); partitions not being reassigned have no entry there."""

    topic_id: uuid.UUID
    partitions: dict[int, tuple[int, ...]]
    adding_replicas: dict[int, tuple[int, ...]] = field(default_factory=dict)
    removing_replicas: dict[int, tuple[int, ...]] = field(default_factory=dict)

    def encode(self) -> bytes:
        return _dumps(
            {
                "version": 3,
                "topic_id": uuid_to_kafka_str(self.topic_id),
                "partitions": _encode_replica_map(self.partitions),
                "adding_replicas": _encode_replica_map(self.adding_replicas),
                "removing_replicas": _encode_replica_map(self.removing_replicas),
            }
        )

    @classmethod
    def decode(cls, data: bytes) -> TopicAssignment:
        doc = _loads(data)
        return cls(
            kafka_str_to_uuid(doc["topic_id"]),
            _decode_replica_map(doc["partitions"]),
            _decode_replica_map(doc.get("adding_replicas", {})),
            _decode_replica_map(doc.get("removing_replicas", {})),
        )


def _encode_replica_map(replicas: dict[int, tuple[int, ...]]) -> dict[str, list[int]]:
    # Kafka writes only partitions with a non-empty list.
    return {str(p): list(r) for p, r in sorted(replicas.items()) if r}


def _decode_replica_map(doc: dict[str, Any]) -> dict[int, tuple[int, ...]]:
    return {int(p): tuple(int(b) for b in r) for p, r in doc.items()}


def encode_partition_state(state: PartitionState) -> bytes:
    return _dumps(
        {
            "version": 1,
            "controller_epoch": state.controller_epoch,
            "leader": state.leader,
            "leader_epoch": state.leader_epoch,
            "isr": list(state.isr),
            "leader_recovery_state": 0,
        }
    )


def decode_partition_state(
    data: bytes, replicas: tuple[int, ...], zk_version: int
) -> PartitionState:
    doc = _loads(data)
    return PartitionState(
        leader=int(doc["leader"]),
        leader_epoch=int(doc["leader_epoch"]),
        isr=tuple(int(b) for b in doc["isr"]),
        replicas=replicas,
        partition_epoch=zk_version,
        controller_epoch=int(doc.get("controller_epoch", 0)),
    )


def encode_topic_config(overrides: dict[str, str]) -> bytes:
    return _dumps({"version": 1, "config": dict(sorted(overrides.items()))})


def decode_topic_config(data: bytes) -> dict[str, str]:
    config = _loads(data).get("config", {})
    return {str(k): str(v) for k, v in config.items()}


def encode_controller(broker_id: int) -> bytes:
    return _dumps(
        {
            "version": 2,
            "brokerid": broker_id,
            "timestamp": str(int(time.time() * 1000)),
            "kraftControllerEpoch": -1,
        }
    )


def decode_controller(data: bytes) -> int:
    return int(_loads(data)["brokerid"])


def encode_cluster_id(cluster_id: str) -> bytes:
    return _dumps({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes) -> str:
    return str(_loads(data)["id"])
