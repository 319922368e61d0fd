"""The meta.properties of all of a node's log directories, checked together (Kafka's
`MetaPropertiesEnsemble`): what `tiercel storage format` writes and a KRaft node checks
before it opens anything.

Each directory is formatted (its meta.properties read), empty (no file: not formatted,
or not even created) or in error (the file could not be read). `verify` raises
`MetaPropertiesError` with Kafka's messages when the formatted ones disagree on the
cluster or node, share a directory id, or hold a reserved one. Blocking file IO:
executor or command-line only.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tiercel.storage.meta_properties import FILE_NAME, MetaProperties, is_reserved_directory_id

__all__ = ["MetaPropertiesEnsemble", "MetaPropertiesError"]


class MetaPropertiesError(Exception):
    """The log directories cannot be used as they are; the message says why."""


@dataclass(frozen=True, slots=True)
class MetaPropertiesEnsemble:
    """Invariant: every directory is in exactly one of the three groups."""

    log_dir_props: Mapping[str, MetaProperties]
    empty_log_dirs: frozenset[str]
    error_log_dirs: Mapping[str, str]
    metadata_log_dir: str | None

    @classmethod
    def load(
        cls, log_dirs: Iterable[str], metadata_log_dir: str | None = None
    ) -> MetaPropertiesEnsemble:
        """Read every directory's meta.properties (the metadata log dir's too)."""
        dirs = sorted({*log_dirs, *([metadata_log_dir] if metadata_log_dir else [])})
        props: dict[str, MetaProperties] = {}
        empty: set[str] = set()
        errors: dict[str, str] = {}
        for log_dir in dirs:
            try:
                meta = MetaProperties.read(log_dir)
            except (OSError, ValueError) as e:
                errors[log_dir] = str(e)
                continue
            if meta is None:
                empty.add(log_dir)
            else:
                props[log_dir] = meta
        return cls(props, frozenset(empty), errors, metadata_log_dir)

    def verify(
        self,
        expected_cluster_id: str | None,
        expected_node_id: int | None,
        require_at_least_one_valid: bool = False,
        require_metadata_log_dir: bool = False,
    ) -> None:
        """Kafka's MetaPropertiesEnsemble.verify."""
        if require_at_least_one_valid and not self.log_dir_props:
            raise MetaPropertiesError("No readable meta.properties files found.")
        seen: dict[uuid.UUID, str] = {}
        for log_dir, meta in sorted(self.log_dir_props.items()):
            path = os.path.join(log_dir, FILE_NAME)
            if expected_cluster_id is None:
                expected_cluster_id = meta.cluster_id
            elif meta.cluster_id != expected_cluster_id:
                raise MetaPropertiesError(
                    f"Invalid cluster.id in: {path}. Expected {expected_cluster_id}, but read "
                    f"{meta.cluster_id}"
                )
            if expected_node_id is None:
                expected_node_id = meta.node_id
            elif meta.node_id != expected_node_id:
                raise MetaPropertiesError(
                    f"Stored node id {meta.node_id} doesn't match previous node id "
                    f"{expected_node_id} in {path}. If you moved your data, make sure your "
                    "configured node id matches. If you intend to create a new node, you "
                    "should remove all data in your data directories."
                )
            if meta.directory_id is not None:
                if is_reserved_directory_id(meta.directory_id):
                    raise MetaPropertiesError(
                        f"Invalid reserved directory ID {meta.directory_id} found in {log_dir}"
                    )
                other = seen.setdefault(meta.directory_id, log_dir)
                if other != log_dir:
                    raise MetaPropertiesError(
                        f"Duplicate directory ID {meta.directory_id} found. It was the ID of "
                        f"{other}, but also of {log_dir}"
                    )
        if require_metadata_log_dir and self.metadata_log_dir is None:
            raise MetaPropertiesError("No metadata log directory was specified.")
        if self.metadata_log_dir is not None and self.metadata_log_dir in self.error_log_dirs:
            raise MetaPropertiesError(
                f"Encountered I/O error in metadata log directory {self.metadata_log_dir}. "
                "Cannot continue."
            )
