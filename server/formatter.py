"""Formatting a KRaft node's directories (Kafka's Formatter, which StorageTool's format
command drives): meta.properties v1 with a new directory.id in every directory not
formatted yet, the bootstrap metadata (`bootstrap.checkpoint`) beside it, at the
metadata.version and feature levels asked for. The messages are Kafka's.

With the initial voters of a dynamic quorum (KIP-853: ``--standalone`` or
``--initial-controllers``) kraft.version is 1, the metadata log dir of one of those
voters gets the directory id the voters name for it, and the metadata partition gets
the bootstrap snapshot ``00000000000000000000-0000000000.checkpoint``: a control batch
of SnapshotHeaderRecord, KRaftVersionRecord and VotersRecord, then the footer (Kafka's
Formatter.writeDynamicQuorumSnapshot), from which the Raft client reads its voters."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TextIO

from tiercel.config.broker_config import BrokerConfig
from tiercel.protocol.metadata.metadata_version import (
    FEATURE_NAME,
    LATEST_PRODUCTION,
    MetadataVersion,
)
from tiercel.server.metadata.bootstrap_directory import write_bootstrap_file
from tiercel.server.metadata.bootstrap_metadata import BootstrapMetadata
from tiercel.server.metadata.supported_features import (
    KRAFT_VERSION,
    SUPPORTED_FEATURES,
    feature_named,
)
from tiercel.server.raft.bootstrap_snapshot import write_dynamic_quorum_snapshot
from tiercel.server.raft.dynamic_voters import DynamicVoter, DynamicVoters
from tiercel.server.raft.voter_set import VoterSet
from tiercel.server.scram_parser import ScramParserError, parse_scram_arguments
from tiercel.storage.checkpoint_file import kafka_str_to_uuid, uuid_to_kafka_str
from tiercel.storage.meta_properties import MetaProperties, random_directory_id
from tiercel.storage.meta_properties_ensemble import MetaPropertiesEnsemble

__all__ = [
    "FormatterError",
    "bootstrap_metadata",
    "effective_kraft_version",
    "format_storage",
    "initial_controllers",
]


class FormatterError(Exception):
    """Formatting refused; the message says why (Kafka's FormatterException)."""


def _feature_levels(features: list[str]) -> dict[str, int]:
    levels: dict[str, int] = {}
    for text in features:
        name, sep, level = text.partition("=")
        if not sep or not level.strip().lstrip("-").isdigit():
            raise FormatterError(f"Can't parse feature={text}. The format is FEATURE=LEVEL.")
        levels[name.strip()] = int(level)
    return levels


def effective_kraft_version(features: list[str], dynamic_quorum: bool) -> int:
    """kraft.version: 1 with initial voters, else 0; a level given with ``--feature`` must
    agree (Kafka's Formatter.effectiveKRaftFeatureLevel)."""
    level = _feature_levels(features).get(KRAFT_VERSION)
    if level is None:
        return 1 if dynamic_quorum else 0
    if level not in (0, 1):
        raise FormatterError(f"No feature:{KRAFT_VERSION} with feature level {level}")
    if level == 0 and dynamic_quorum:
        raise FormatterError(
            f"Cannot set {KRAFT_VERSION} to {level} if KIP-853 configuration is present. "
            f"Try removing the --feature flag for {KRAFT_VERSION}."
        )
    if level != 0 and not dynamic_quorum:
        raise FormatterError(
            f"Cannot set {KRAFT_VERSION} to {level} unless KIP-853 configuration is present. "
            f"Try removing the --feature flag for {KRAFT_VERSION}."
        )
    return level


def bootstrap_metadata(
    release_version: str | None, features: list[str], scram_arguments: Sequence[str] = ()
) -> BootstrapMetadata:
    """The bootstrap records of ``--release-version`` and ``--feature``s: every feature
    at its default for the release unless given (Kafka's Formatter
    calculateEffectiveReleaseVersion and calculateEffectiveFeatureLevels), then the
    UserScramCredentialRecords of ``--add-scram`` (Kafka's Formatter with ScramParser).
    kraft.version is `effective_kraft_version`'s: it has no record here, it lives in the
    KRaft control records."""
    levels = _feature_levels(features)
    levels.pop(KRAFT_VERSION, None)
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
        if feature.name != KRAFT_VERSION:
            levels.setdefault(feature.name, feature.default_level(version))
    bootstrap = BootstrapMetadata.from_versions(version, levels, "format command")
    if not scram_arguments:
        return bootstrap
    if not version.is_scram_supported():
        raise FormatterError(
            f"SCRAM is only supported in {FEATURE_NAME} {MetadataVersion.IBP_3_5_IV2} or later."
        )
    try:
        scram = parse_scram_arguments(scram_arguments)
    except ScramParserError as e:
        raise FormatterError(str(e)) from None
    return BootstrapMetadata.from_records([*bootstrap.records, *scram], "format command")


def initial_controllers(
    config: BrokerConfig, standalone: bool, initial: str | None, no_initial: bool
) -> DynamicVoters | None:
    """The initial voters of ``--standalone`` or ``--initial-controllers``, None for a
    static quorum or ``--no-initial-controllers``; FormatterError as Kafka's StorageTool
    refuses (runFormatCommand, createStandaloneDynamicVoters)."""
    is_controller = "controller" in config.process_roles
    if config.quorum_voters and (standalone or initial is not None):
        # Kafka 4.1's StorageTool (KAFKA-19489): a node of a static quorum with voters
        # of its own would form a second quorum.
        raise FormatterError(
            "You cannot use --standalone or --initial-controllers when "
            "controller.quorum.voters is set. For a dynamic quorum, remove "
            "controller.quorum.voters and set controller.quorum.bootstrap.servers instead."
        )
    voters: DynamicVoters | None = None
    if initial is not None:
        try:
            voters = DynamicVoters.parse(initial)
        except ValueError as e:
            raise FormatterError(str(e)) from None
    if standalone:
        if not is_controller:
            raise FormatterError("You can only use --standalone on a controller.")
        voters = DynamicVoters.of([_standalone_voter(config)])
    if not no_initial and is_controller and not config.quorum_voters and voters is None:
        raise FormatterError(
            "Because controller.quorum.voters is not set on this controller, you must "
            "specify one of the following: --standalone, --initial-controllers, or "
            "--no-initial-controllers."
        )
    return voters


def _standalone_voter(config: BrokerConfig) -> DynamicVoter:
    """This controller at its first advertised controller listener, with a new directory
    id (Kafka's StorageTool.createStandaloneDynamicVoters)."""
    name = config.controller_listener_names[0]
    listener = next((a for a in config.advertised_listeners if a.name == name), None)
    if listener is None:
        listener = next((a for a in config.listeners if a.name == name), None)
    if listener is None:
        raise FormatterError("No controller listeners found.")
    return DynamicVoter(
        random_directory_id(), config.node_id, listener.host or "localhost", listener.port
    )


def format_storage(
    config: BrokerConfig,
    directories: list[str],
    cluster_id: str,
    bootstrap: BootstrapMetadata,
    ignore_formatted: bool,
    out: TextIO,
    initial_controllers: DynamicVoters | None = None,
    kraft_version: int = 0,
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
    local_voter = (
        None if initial_controllers is None else initial_controllers.voters.get(config.node_id)
    )
    seen = {m.directory_id for m in ensemble.log_dir_props.values()}
    if local_voter is not None:
        seen.add(local_voter.directory_id)
    for directory in sorted(ensemble.empty_log_dirs):
        is_metadata = directory == config.metadata_log_dir
        if is_metadata and local_voter is not None:
            # The voter's key names this directory: the id must be the one given.
            directory_id = local_voter.directory_id
        else:
            directory_id = random_directory_id()
            while directory_id in seen:
                directory_id = random_directory_id()
            seen.add(directory_id)
        print(
            f"Formatting {_description(is_metadata, initial_controllers, local_voter)} "
            f"{directory} with {FEATURE_NAME} {bootstrap.metadata_version}.",
            file=out,
        )
        voters = None
        if is_metadata and initial_controllers is not None:
            voters = initial_controllers.to_voter_set(config.controller_listener_names[0])
        meta = MetaProperties(cluster_id, config.node_id, directory_id)
        _write_directory(directory, bootstrap, meta, voters, kraft_version)


def _write_directory(
    directory: str,
    bootstrap: BootstrapMetadata,
    meta: MetaProperties,
    voters: VoterSet | None,
    kraft_version: int,
) -> None:
    try:
        os.makedirs(directory, exist_ok=True)
        # The bootstrap files go first: meta.properties marks the directory formatted,
        # so a crash in between leaves it to format again (Kafka's Formatter writes them
        # in the Copier's pre-write handler).
        write_bootstrap_file(directory, bootstrap)
        if voters is not None:
            write_dynamic_quorum_snapshot(directory, voters, kraft_version)
        meta.write(directory)
    except OSError as e:
        raise FormatterError(f"Error while writing meta.properties file {directory}: {e}") from None


def _description(
    is_metadata: bool, initial_controllers: DynamicVoters | None, local_voter: object
) -> str:
    """Kafka's Formatter.DirectoryType.description."""
    if not is_metadata:
        return "data directory"
    if initial_controllers is None:
        return "metadata directory"
    if local_voter is None:
        return "dynamic metadata directory"
    return "dynamic metadata voter directory"
