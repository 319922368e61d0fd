#!/usr/bin/env python3
"""The broker image's entry point: format a KRaft node's volume on its first start, then
``tiercel broker <config file> --override ...``.

Broker properties come from the YAML file at ``$TIERCEL_CONFIG_FILE`` (default
/etc/tiercel/broker.yaml) and from environment variables, which win: each
``TIERCEL_CFG_<NAME>=<value>`` becomes ``--override <name>=<value>``, the name lower-cased
with ``_`` read as ``.`` and ``__`` as ``_`` (the convention of Kafka's container images:
``TIERCEL_CFG_LOG_RETENTION_HOURS=24`` sets log.retention.hours). Arguments given to the
container (its command) are passed on after them, e.g. ``--log-level DEBUG``.

A KRaft node (``process.roles`` set, in the file or by ``TIERCEL_CFG_PROCESS_ROLES``)
must be formatted before it starts. On its first start, when a directory of the node
(log.dirs, metadata.log.dir) has no meta.properties yet, the entry point runs
``tiercel storage format -t $CLUSTER_ID <config file> <the same overrides>
--ignore-formatted``, which formats the empty directories and leaves the others. That is
what Apache Kafka's images do: their launch script (docker/jvm/launch) runs
KafkaDockerWrapper's setup, whose formatStorageCmd formats with CLUSTER_ID, and accepts
an "already formatted" refusal; their configure script stops when CLUSTER_ID is not set
in KRaft mode. Kafka's images run the formatter on every start; here a node whose
directories are all formatted skips it (a Python process start less on every restart)
and its meta.properties are checked against CLUSTER_ID and node.id directly, the check
Kafka's Formatter.doFormat makes first (MetaPropertiesEnsemble.verify), so a volume of
another cluster still stops the container. Without CLUSTER_ID a formatted volume starts
as it is, and an unformatted one stops the container with a message saying what to
set. A node without ``process.roles`` (the image's default single broker) is never
formatted.

The process then replaces itself with tiercel (exec), so the broker is PID 1 and receives
docker's SIGTERM itself: a `docker stop` is Tiercel's clean, controlled shutdown.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Collection, Mapping, Sequence
from typing import Final

from tiercel.config.config_def import ConfigError
from tiercel.config.loader import load_broker_config
from tiercel.storage.meta_properties_ensemble import (
    MetaPropertiesEnsemble,
    MetaPropertiesError,
)

PREFIX: Final = "TIERCEL_CFG_"
DEFAULT_CONFIG_FILE: Final = "/etc/tiercel/broker.yaml"
CLUSTER_ID: Final = "CLUSTER_ID"


class NotFormattedError(Exception):
    """A KRaft node's directories are not formatted and nothing says for which cluster."""


def property_name(variable: str) -> str:
    """``LOG_RETENTION_HOURS`` → ``log.retention.hours``; ``__`` stands for ``_``."""
    return variable.replace("__", "\0").replace("_", ".").replace("\0", "_")


def config_file(environ: Mapping[str, str]) -> str:
    return environ.get("TIERCEL_CONFIG_FILE", DEFAULT_CONFIG_FILE)


def overrides(environ: Mapping[str, str]) -> list[str]:
    """The ``key=value`` properties the environment sets, in variable name order."""
    return [
        f"{property_name(variable[len(PREFIX) :].lower())}={environ[variable]}"
        for variable in sorted(environ)
        if variable.startswith(PREFIX) and len(variable) > len(PREFIX)
    ]


def _override_args(environ: Mapping[str, str]) -> list[str]:
    return [arg for override in overrides(environ) for arg in ("--override", override)]


def broker_command(environ: Mapping[str, str], extra: Sequence[str]) -> list[str]:
    """The tiercel command line the environment asks for, overrides in name order."""
    return ["tiercel", "broker", config_file(environ), *_override_args(environ), *extra]


def format_command(environ: Mapping[str, str], cluster_id: str) -> list[str]:
    """`tiercel storage format` of the node the broker command starts: the same file and
    overrides, so it formats exactly the directories the broker will open."""
    return [
        "tiercel",
        "storage",
        "format",
        "-t",
        cluster_id,
        config_file(environ),
        *_override_args(environ),
        "--ignore-formatted",
    ]


def cluster_id(environ: Mapping[str, str]) -> str | None:
    return environ.get(CLUSTER_ID, "").strip() or None


def format_step(
    environ: Mapping[str, str], kraft_mode: bool, unformatted: Collection[str]
) -> list[str] | None:
    """The format command to run before the broker starts, or None: not a KRaft node,
    or every directory formatted. NotFormattedError when directories need formatting
    and CLUSTER_ID is not set (Kafka's configure script stops on it too)."""
    if not kraft_mode or not unformatted:
        return None
    given = cluster_id(environ)
    if given is None:
        raise NotFormattedError(
            f"{', '.join(sorted(unformatted))} not formatted (no meta.properties) and "
            f"{CLUSTER_ID} is not set: set {CLUSTER_ID} to the cluster's id, the same on "
            "every node (`tiercel storage random-uuid` makes a new one), and the volume "
            "is formatted on this start"
        )
    return format_command(environ, given)


def node_storage(environ: Mapping[str, str]) -> tuple[bool, frozenset[str]]:
    """Whether the configured node runs KRaft, and which of its directories (log.dirs
    and metadata.log.dir) hold no meta.properties yet. ConfigError if the configuration
    does not load; MetaPropertiesError (Kafka's messages) if a formatted directory
    belongs to another cluster than CLUSTER_ID or to another node."""
    config = load_broker_config(config_file(environ), overrides(environ))
    if not config.kraft_mode:
        return False, frozenset()
    ensemble = MetaPropertiesEnsemble.load(config.log_dirs, config.metadata_log_dir)
    ensemble.verify(cluster_id(environ), config.node_id)
    return True, ensemble.empty_log_dirs


def main() -> None:
    environ = dict(os.environ)
    try:
        step = format_step(environ, *node_storage(environ))
    except (ConfigError, MetaPropertiesError, NotFormattedError) as e:
        sys.exit(f"tiercel-docker-entrypoint: {e}")
    if step is not None:
        formatted = subprocess.run(step, check=False)
        if formatted.returncode != 0:
            sys.exit(formatted.returncode)
    command = broker_command(environ, sys.argv[1:])
    os.execvp(command[0], command)


if __name__ == "__main__":
    main()
