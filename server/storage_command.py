"""``tiercel storage``: prepare a KRaft node's directories before its first start, as
Kafka's ``kafka-storage`` does.

- ``tiercel storage random-uuid``: a new cluster id (Kafka's `Uuid.randomUuid`, 22
  characters of URL-safe base64).
- ``tiercel storage format -t <cluster-id> [CONFIG.yaml] [--override key=value]...
  [--release-version V] [--feature NAME=LEVEL]... [--ignore-formatted]``: write
  `meta.properties` (version 1: cluster.id, node.id, a new directory.id) into every log
  dir and the metadata log dir, with the bootstrap metadata (`bootstrap.checkpoint`:
  metadata.version and the other features' levels) beside it; refuses a configuration
  without `process.roles` and, unless ``--ignore-formatted``, a directory already
  formatted.
- ``tiercel storage info [CONFIG.yaml] [--override ...]``: what the directories hold.

The messages are Kafka's (`StorageTool`, `Formatter`, `MetaPropertiesEnsemble`), so
runbooks written for Kafka read the same.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TextIO

from tiercel.config.broker_config import BrokerConfig
from tiercel.config.config_def import ConfigError
from tiercel.config.loader import load_broker_config
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
from tiercel.storage.meta_properties_ensemble import MetaPropertiesEnsemble, MetaPropertiesError

__all__ = ["add_storage_parser", "run_storage"]


class FormatterError(Exception):
    """Formatting refused; the message says why (Kafka's FormatterException)."""


def add_storage_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the verb and its subcommands to the ``tiercel`` parser."""
    storage = commands.add_parser(
        "storage",
        help="format a KRaft node's directories, or show what they hold",
        description="Prepare a KRaft node's log directories, as kafka-storage does.",
    )
    verbs = storage.add_subparsers(dest="storage_command", required=True)
    verbs.add_parser("random-uuid", help="print a new cluster id")
    fmt = verbs.add_parser("format", help="format the node's log directories")
    fmt.add_argument("-t", "--cluster-id", required=True, help="the cluster's id")
    fmt.add_argument(
        "-r",
        "--release-version",
        help="the metadata.version to start the cluster at, as a release (4.0) or a "
        "version (4.0-IV3); the latest production version by default",
    )
    fmt.add_argument(
        "-f",
        "--feature",
        action="append",
        default=[],
        metavar="FEATURE=LEVEL",
        help="a feature's level, instead of its default for the release version",
    )
    fmt.add_argument(
        "-g",
        "--ignore-formatted",
        action="store_true",
        help="format the directories not formatted yet and leave the others",
    )
    info = verbs.add_parser("info", help="show what the node's log directories hold")
    for verb in (fmt, info):
        verb.add_argument("config", nargs="?", help="the node's YAML configuration")
        verb.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")


def run_storage(args: argparse.Namespace) -> int:
    """Run the subcommand; the exit code (errors go to stderr, as Kafka's TerseFailure)."""
    out = sys.stdout
    if args.storage_command == "random-uuid":
        print(MetaProperties.generate_cluster_id(), file=out)
        return 0
    try:
        config = load_broker_config(args.config, args.override)
        if args.storage_command == "format":
            bootstrap = bootstrap_metadata(args.release_version, args.feature)
            format_storage(config, args.cluster_id, bootstrap, args.ignore_formatted, out)
            return 0
        return storage_info(config, out)
    except (ConfigError, FormatterError, MetaPropertiesError) as e:
        print(e, file=sys.stderr)
        return 1


def log_directories(config: BrokerConfig) -> list[str]:
    """Every directory the node keeps data in: log.dirs and metadata.log.dir, sorted."""
    return sorted({*config.log_dirs, config.metadata_log_dir})


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
    directories = log_directories(config)
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


def storage_info(config: BrokerConfig, out: TextIO) -> int:
    """Kafka's StorageTool.infoCommand: the directories found, their metadata, and the
    problems (unformatted, mismatched); exit code 1 when there is a problem."""
    problems: list[str] = []
    found: list[str] = []
    first: MetaProperties | None = None
    for directory in log_directories(config):
        if not os.path.isdir(directory):
            exists = os.path.exists(directory)
            problems.append(f"{directory} {'is not a directory' if exists else 'does not exist'}")
            continue
        found.append(directory)
        try:
            meta = MetaProperties.read(directory)
        except (OSError, ValueError) as e:
            problems.append(f"Error loading {os.path.join(directory, 'meta.properties')}: {e}")
            continue
        if meta is None:
            problems.append(f"{directory} is not formatted.")
        elif first is None:
            first = meta
        elif first.cluster_id != meta.cluster_id:
            problems.append("Mismatched cluster IDs between storage directories.")
        elif first.node_id != meta.node_id:
            problems.append("Mismatched node IDs between storage directories.")
    if found:
        print("Found log director" + ("y:" if len(found) == 1 else "ies:"), file=out)
        print("".join(f"  {d}\n" for d in found), file=out)
    if first is not None:
        print(f"Found metadata: {_properties(first)}\n", file=out)
    if problems:
        print("Found problem" + (":" if len(problems) == 1 else "s:"), file=out)
        print("".join(f"  {p}\n" for p in problems), file=out)
        return 1
    return 0


def _properties(meta: MetaProperties) -> str:
    """Kafka's rendering of the sorted properties: {cluster.id=..., node.id=1, ...}."""
    pairs = {"cluster.id": meta.cluster_id, "node.id": str(meta.node_id)}
    if meta.directory_id is not None:
        pairs["directory.id"] = uuid_to_kafka_str(meta.directory_id)
    pairs["version"] = str(meta.version)
    return "{" + ", ".join(f"{k}={v}" for k, v in sorted(pairs.items())) + "}"
