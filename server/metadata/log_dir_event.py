"""Log-dir failure notifications in the MetadataStore (Kafka's ZooKeeper mode).

    /log_dir_event_notification/log_dir_event_<broker>_<id>   (ephemeral)
        {"version":1,"broker":2,"event":1,"log_dir":"/data/a",
         "partitions":[{"topic":"t","partition":0},..]}

Kafka's broker writes a sequential node ``{"version":1,"broker":..,"event":1}`` and the
controller, which then deletes it, learns which replicas are offline from the broker's
LeaderAndIsr responses. Tiercel has no LeaderAndIsr, so the node names the failed dir's
partitions itself, and it is ephemeral: it lasts while the broker's session does, as an
offline dir stays offline until the broker restarts. A new controller and every broker's
metadata read them again; only nodes of a broker's current registration count.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from tiercel.server.metadata.store import MetadataStore, NoNodeError
from tiercel.storage.topic_partition import TopicPartition

LOG_DIR_EVENT_NOTIFICATION_PATH: Final = "/log_dir_event_notification"
LOG_DIR_EVENT_PREFIX: Final = "log_dir_event_"
LOG_DIR_FAILURE_EVENT: Final = 1


@dataclass(frozen=True, slots=True)
class LogDirEvent:
    broker: int
    log_dir: str
    partitions: tuple[TopicPartition, ...]

    def encode(self) -> bytes:
        return json.dumps(
            {
                "version": 1,
                "broker": self.broker,
                "event": LOG_DIR_FAILURE_EVENT,
                "log_dir": self.log_dir,
                "partitions": [
                    {"topic": tp.topic, "partition": tp.partition} for tp in self.partitions
                ],
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> LogDirEvent:
        doc = json.loads(data)
        return cls(
            int(doc["broker"]),
            str(doc.get("log_dir", "")),
            tuple(
                TopicPartition(p["topic"], int(p["partition"])) for p in doc.get("partitions", ())
            ),
        )


async def propagate_log_dir_event(store: MetadataStore, event: LogDirEvent) -> str:
    """Kafka's KafkaZkClient.propagateLogDirEvent; returns the node's path."""
    name = f"{LOG_DIR_EVENT_PREFIX}{event.broker}_{uuid.uuid4().hex[:16]}"
    return await store.create(
        f"{LOG_DIR_EVENT_NOTIFICATION_PATH}/{name}",
        event.encode(),
        ephemeral=True,
        make_parents=True,
    )


async def read_offline_replicas(
    store: MetadataStore, sessions: Mapping[int, int]
) -> dict[TopicPartition, frozenset[int]]:
    """Per partition, the brokers whose replica of it is on a failed log dir, from the
    notifications of the brokers' current registrations (``sessions``: broker id → the
    session that registered it)."""
    try:
        children = await store.get_children(LOG_DIR_EVENT_NOTIFICATION_PATH)
    except NoNodeError:
        return {}
    offline: dict[TopicPartition, set[int]] = {}
    for child in children:
        try:
            data, stat = await store.get(f"{LOG_DIR_EVENT_NOTIFICATION_PATH}/{child}")
            event = LogDirEvent.decode(data)
        except (NoNodeError, ValueError, KeyError, TypeError):
            continue  # gone meanwhile, or not ours to read
        if sessions.get(event.broker) != stat.ephemeral_owner:
            continue
        for tp in event.partitions:
            offline.setdefault(tp, set()).add(event.broker)
    return {tp: frozenset(brokers) for tp, brokers in offline.items()}
