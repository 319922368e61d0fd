"""Formatting a KRaft node's directories (Kafka's Formatter, which StorageTool's format
command drives): meta.properties v1 with a new directory.id in every directory not
formatted yet, the bootstrap metadata (`bootstrap.checkpoint`) beside it, at the
metadata.version and feature levels asked for. The messages are Kafka's."""

from __future__ import annotations

import os
from typing import TextIO

from tiercel.config.broker_config import BrokerConfig
from tiercel.protocol.metadata.metadata_version import (
    FEATURE_NAME,
    LATEST_PRODUCTION,
    MetadataVersion,
)
from tiercel.server.metadata.bootstrap_directory import write_bootstrap_file
from tiercel.server.metadata.bootstrap_metadata import BootstrapMetadata
from tiercel.server.metadata.supported_features import SUPPORTED_FEATURES, feature_named
from tiercel.storage.checkpoint_file import kafka_str_to_uuid, uuid_to_kafka_str
from tiercel.storage.meta_properties import MetaProperties, random_directory_id
from tiercel.storage.meta_properties_ensemble import MetaPropertiesEnsemble

__all__ = ["FormatterError", "bootstrap_metadata", "format_storage"]


class FormatterError(Exception):
    """Formatting refused; the message says why (Kafka's FormatterException)."""


def bootstrap_metadata(release_version: str | None, features: list[str]) -> BootstrapMetadata:
    """The bootstrap records of ``--release-version`` and ``--feature``s: every feature
    at its default for the release unless given (Kafka's Formatter
    calculateEffectiveReleaseVersion and calculateEffectiveFeatureLevels)."""
    levels: dict[str, int] = {}
    for text in features:
        name, sep, level = text.partition("=")
        if not sep or not level.strip().lstrip("-").isdigit():
            raise FormatterError(f"Can't parse feature={text}. The format is FEATURE=LEVEL.")
        levels[name.strip()] = int(level)
    try:
        if FEATURE_NAME in levels:
            if release_version is not None:
                raise FormatterError(
                    f"Use --release-version instead of --feature {FEATURE_NAME}=X to avoid "
                    "ambiguity."
                )
            version = MetadataVersion.from_feature_level(levels.pop(FEATURE_NAME))
        elif release_version is not None:
            version = MetadataVersion.from_version_string(release_version)
        else:
            version = LATEST_PRODUCTION
        for feature_name, feature_level in levels.items():
            feature_named(feature_name).validate(feature_level)
    except ValueError as e:
        raise FormatterError(str(e)) from None
    for feature in SUPPORTED_FEATURES:
        levels.setdefault(feature.name, feature.default_level(version))
    return BootstrapMetadata.from_versions(version, levels, "format command")


def format_storage(
    config: BrokerConfig,
    directories: list[str],
    cluster_id: str,
    bootstrap: BootstrapMetadata,
    ignore_formatted: bool,
    out: TextIO,
) -> None:
    """Kafka's StorageTool.runFormatCommand and Formatter.doFormat."""
    if not config.kraft_mode:
        raise FormatterError(
            "The configuration appears to be for a node without process.roles (not in "
            "KRaft mode). Formatting is only supported for nodes in KRaft mode."
        )
    try:
        cluster_id = uuid_to_kafka_str(kafka_str_to_uuid(cluster_id))
    except ValueError:
        raise FormatterError(
            f"Cluster ID string {cluster_id} does not appear to be a valid UUID: "
            "use `tiercel storage random-uuid` to make one"
        ) from None
    ensemble = MetaPropertiesEnsemble.load(directories, config.metadata_log_dir)
    ensemble.verify(cluster_id, config.node_id)
    if ensemble.log_dir_props and not ignore_formatted:
        first = sorted(ensemble.log_dir_props)[0]
        raise FormatterError(
            f"Log directory {first} is already formatted. Use --ignore-formatted to ignore "
            "this directory and format the others."
        )
    for error_dir in sorted(ensemble.error_log_dirs):
        print(f"I/O error trying to read log directory {error_dir}. Ignoring...", file=out)
    if not ensemble.empty_log_dirs:
        if ensemble.error_log_dirs and not ensemble.log_dir_props:
            raise FormatterError("No available log directories to format.")
        print("All of the log directories are already formatted.", file=out)
        return
    seen = {m.directory_id for m in ensemble.log_dir_props.values()}
    for directory in sorted(ensemble.empty_log_dirs):
        directory_id = random_directory_id()
        while directory_id in seen:
            directory_id = random_directory_id()
        seen.add(directory_id)
        kind = "metadata" if directory == config.metadata_log_dir else "data"
        print(
            f"Formatting {kind} directory {directory} with {FEATURE_NAME} "
            f"{bootstrap.metadata_version}.",
            file=out,
        )
        try:
            os.makedirs(directory, exist_ok=True)
            # The bootstrap file goes first: meta.properties marks the directory
            # formatted, so a crash in between leaves it to format again (Kafka's
            # Formatter writes it in the Copier's pre-write handler).
            write_bootstrap_file(directory, bootstrap)
            MetaProperties(cluster_id, config.node_id, directory_id).write(directory)
        except OSError as e:
            raise FormatterError(
                f"Error while writing meta.properties file {directory}: {e}"
            ) from None
