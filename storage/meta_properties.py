"""``meta.properties``: which cluster and node a log directory belongs to.

Kafka's Java-properties text, as a KRaft broker writes it:

    #
    #<date>
    cluster.id=<22-char base64 uuid>
    directory.id=<22-char base64 uuid>
    node.id=1
    version=1

A log dir from another node or cluster must not be adopted silently: the LogManager
refuses to start when node.id or cluster.id disagree. Blocking file IO: executor only.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from tiercel.storage.checkpoint_file import atomic_write, random_kafka_uuid, uuid_to_kafka_str

FILE_NAME = "meta.properties"


@dataclass(frozen=True, slots=True)
class MetaProperties:
    cluster_id: str
    node_id: int

    @staticmethod
    def generate_cluster_id() -> str:
        return uuid_to_kafka_str(random_kafka_uuid())

    @classmethod
    def read(cls, log_dir: str) -> MetaProperties | None:
        path = os.path.join(log_dir, FILE_NAME)
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            return None
        props = {}
        for line in lines:
            if line.startswith("#") or "=" not in line:
                continue
            key, _, value = line.partition("=")
            props[key.strip()] = value.strip()
        try:
            return cls(props["cluster.id"], int(props["node.id"]))
        except (KeyError, ValueError) as e:
            raise ValueError(f"{path} is missing cluster.id or node.id: {e}") from e

    def write_if_missing(self, log_dir: str) -> None:
        path = os.path.join(log_dir, FILE_NAME)
        if os.path.exists(path):
            return
        text = (
            "#\n"
            f"#{time.strftime('%a %b %d %H:%M:%S UTC %Y', time.gmtime())}\n"
            f"cluster.id={self.cluster_id}\n"
            f"directory.id={uuid_to_kafka_str(random_kafka_uuid())}\n"
            f"node.id={self.node_id}\n"
            "version=1\n"
        )
        atomic_write(path, text.encode())
