"""``tiercel storage``: prepare a KRaft node's directories before its first start, as
Kafka's ``kafka-storage`` does.

- ``tiercel storage random-uuid``: a new cluster id (Kafka's `Uuid.randomUuid`, 22
  characters of URL-safe base64).
- ``tiercel storage format -t <cluster-id> [CONFIG.yaml] [--override key=value]...
  [--release-version V] [--feature NAME=LEVEL]... [--add-scram CREDENTIAL]...
  [--ignore-formatted]
  [--standalone | --initial-controllers ID@HOST:PORT:DIR,... | --no-initial-controllers]``:
  write `meta.properties` (version 1: cluster.id, node.id, a new directory.id) into
  every log dir and the metadata log dir, with the bootstrap metadata
  (`bootstrap.checkpoint`: metadata.version and the other features' levels, then the
  SCRAM users of ``--add-scram``, Kafka's syntax) beside it;
  refuses a configuration without `process.roles` and, unless ``--ignore-formatted``, a
  directory already formatted. A controller without `controller.quorum.voters` names
  its dynamic quorum (KIP-853): ``--standalone`` (itself alone, at its advertised
  controller listener), ``--initial-controllers`` (the same list on every node), or
  ``--no-initial-controllers`` (it joins an existing quorum later).
- ``tiercel storage info [CONFIG.yaml] [--override ...]``: what the directories hold.

The messages are Kafka's (`StorageTool`, `Formatter`, `MetaPropertiesEnsemble`), so
runbooks written for Kafka read the same. Formatting itself is `formatter`'s (Kafka's
Formatter), imported by format alone.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TextIO

from tiercel.config.broker_config import BrokerConfig
from tiercel.config.config_def import ConfigError
from tiercel.config.loader import load_broker_config
from tiercel.storage.checkpoint_file import uuid_to_kafka_str
from tiercel.storage.meta_properties import MetaProperties
from tiercel.storage.meta_properties_ensemble import MetaPropertiesError

__all__ = ["add_storage_arguments", "run_storage"]


def add_storage_arguments(storage: argparse.ArgumentParser) -> None:
    """Declare the verb's subcommands and arguments on its parser."""
    storage.description = "Prepare a KRaft node's log directories, as kafka-storage does."
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
        "-S",
        "--add-scram",
        action="append",
        default=[],
        metavar="CREDENTIAL",
        help="a SCRAM user to add to the metadata log, e.g. "
        "'SCRAM-SHA-256=[name=alice,password=alice-secret]' or "
        '\'SCRAM-SHA-512=[name=alice,iterations=8192,salt="N3E=",saltedpassword="YCE="]\'',
    )
    fmt.add_argument(
        "-g",
        "--ignore-formatted",
        action="store_true",
        help="format the directories not formatted yet and leave the others",
    )
    # Kafka's StorageTool: at most one of the three.
    quorum = fmt.add_mutually_exclusive_group()
    quorum.add_argument(
        "-s",
        "--standalone",
        action="store_true",
        help="initialize this controller as a single-node dynamic quorum",
    )
    quorum.add_argument(
        "-N",
        "--no-initial-controllers",
        action="store_true",
        help="initialize a node without a dynamic quorum topology (it joins one later)",
    )
    quorum.add_argument(
        "-I",
        "--initial-controllers",
        metavar="ID@HOST:PORT:DIRECTORY-ID,...",
        help="the initial voters of a dynamic quorum, the same on every node, e.g. "
        "0@example.com:8082:JEXY6aqzQY-32P5TStzaFg,1@example.com:8083:MvDxzVmcRsaTz33bUuRU6A",
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
            return _format(args, config, out)
        return storage_info(config, out)
    except (ConfigError, MetaPropertiesError) as e:
        print(e, file=sys.stderr)
        return 1


def _format(args: argparse.Namespace, config: BrokerConfig, out: TextIO) -> int:
    # Imported here: the bootstrap records' modules take a while to import, and only
    # format writes them.
    from tiercel.server.formatter import (
        FormatterError,
        bootstrap_metadata,
        effective_kraft_version,
        format_storage,
        initial_controllers,
    )

    try:
        voters = initial_controllers(
            config, args.standalone, args.initial_controllers, args.no_initial_controllers
        )
        kraft_version = effective_kraft_version(args.feature, voters is not None)
        bootstrap = bootstrap_metadata(args.release_version, args.feature, args.add_scram)
        format_storage(
            config,
            log_directories(config),
            args.cluster_id,
            bootstrap,
            args.ignore_formatted,
            out,
            voters,
            kraft_version,
        )
    except FormatterError as e:
        print(e, file=sys.stderr)
        return 1
    return 0


def log_directories(config: BrokerConfig) -> list[str]:
    """Every directory the node keeps data in: log.dirs and metadata.log.dir, sorted."""
    return sorted({*config.log_dirs, config.metadata_log_dir})


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
