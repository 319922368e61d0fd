"""``meta.properties``: which cluster and node a log directory belongs to.

Kafka's Java-properties text (`MetaProperties`, version 1, as a KRaft node and
`kafka-storage format` write it):

    #
    #<date>
    cluster.id=<22-char base64 uuid>
    directory.id=<22-char base64 uuid>
    node.id=1
    version=1

A log dir from another node or cluster must not be adopted silently: the LogManager
refuses to start when node.id or cluster.id disagree, and a KRaft node refuses a dir no
one formatted (`meta_properties_ensemble`). Directory ids are Kafka's `DirectoryId`:
random, never one of the 100 reserved ones (UNASSIGNED, LOST, MIGRATING, ...). Blocking
file IO: executor only.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass

from tiercel.storage.checkpoint_file import (
    atomic_write,
    kafka_str_to_uuid,
    random_kafka_uuid,
    uuid_to_kafka_str,
)

__all__ = ["FILE_NAME", "MetaProperties", "random_directory_id"]

FILE_NAME = "meta.properties"
# Kafka's DirectoryId.reserved: the first 100 ids mean something (unassigned, lost, ...).
_RESERVED_DIRECTORY_IDS = 100


def random_directory_id() -> uuid.UUID:
    """Kafka's DirectoryId.random: a random id outside the reserved ones."""
    while True:
        value = random_kafka_uuid()
        if value.int >= _RESERVED_DIRECTORY_IDS:
            return value


def is_reserved_directory_id(value: uuid.UUID) -> bool:
    return value.int < _RESERVED_DIRECTORY_IDS


@dataclass(frozen=True, slots=True)
class MetaProperties:
    """One log dir's meta.properties. ``directory_id`` None: a file written before
    directory ids (Kafka adds one on the next start, as `with_directory_id`)."""

    cluster_id: str
    node_id: int
    directory_id: uuid.UUID | None = None
    version: int = 1

    @staticmethod
    def generate_cluster_id() -> str:
        return uuid_to_kafka_str(random_kafka_uuid())

    @classmethod
    def read(cls, log_dir: str) -> MetaProperties | None:
        """The dir's meta.properties; None when it has none. ValueError when the file
        lacks cluster.id or node.id, or holds a value that does not parse."""
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
            directory_id = props.get("directory.id")
            return cls(
                props["cluster.id"],
                int(props["node.id"]),
                None if directory_id is None else kafka_str_to_uuid(directory_id),
                int(props.get("version", "0")),
            )
        except KeyError as e:
            raise ValueError(f"{e.args[0]} was not specified in {path}") from None
        except ValueError as e:
            raise ValueError(f"{path} holds a value that does not parse: {e}") from None

    def with_directory_id(self, directory_id: uuid.UUID) -> MetaProperties:
        return MetaProperties(self.cluster_id, self.node_id, directory_id, self.version)

    def text(self) -> str:
        """The file's contents, keys in Kafka's (sorted) order."""
        lines = ["#", f"#{time.strftime('%a %b %d %H:%M:%S UTC %Y', time.gmtime())}"]
        lines.append(f"cluster.id={self.cluster_id}")
        if self.directory_id is not None:
            lines.append(f"directory.id={uuid_to_kafka_str(self.directory_id)}")
        lines += [f"node.id={self.node_id}", f"version={self.version}"]
        return "\n".join(lines) + "\n"

    def write(self, log_dir: str) -> None:
        """Write (or replace) the dir's meta.properties: temp file, fsync, rename."""
        atomic_write(os.path.join(log_dir, FILE_NAME), self.text().encode())

    def write_if_missing(self, log_dir: str) -> None:
        """Write the file with a new directory id unless the dir already has one."""
        if not os.path.exists(os.path.join(log_dir, FILE_NAME)):
            self.with_directory_id(random_directory_id()).write(log_dir)
