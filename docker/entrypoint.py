#!/usr/bin/env python3
"""The broker image's entry point: ``tiercel broker <config file> --override ...``.

Broker properties come from the YAML file at ``$TIERCEL_CONFIG_FILE`` (default
/etc/tiercel/broker.yaml) and from environment variables, which win: each
``TIERCEL_CFG_<NAME>=<value>`` becomes ``--override <name>=<value>``, the name lower-cased
with ``_`` read as ``.`` and ``__`` as ``_`` (the convention of Kafka's container images:
``TIERCEL_CFG_LOG_RETENTION_HOURS=24`` sets log.retention.hours). Arguments given to the
container (its command) are passed on after them, e.g. ``--log-level DEBUG``.

The process replaces itself with tiercel (exec), so the broker is PID 1 and receives
docker's SIGTERM itself: a `docker stop` is Tiercel's clean, controlled shutdown.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import Final

PREFIX: Final = "TIERCEL_CFG_"
DEFAULT_CONFIG_FILE: Final = "/etc/tiercel/broker.yaml"


def property_name(variable: str) -> str:
    """``LOG_RETENTION_HOURS`` → ``log.retention.hours``; ``__`` stands for ``_``."""
    return variable.replace("__", "\0").replace("_", ".").replace("\0", "_")


def broker_command(environ: Mapping[str, str], extra: Sequence[str]) -> list[str]:
    """The tiercel command line the environment asks for, overrides in name order."""
    command = ["tiercel", "broker", environ.get("TIERCEL_CONFIG_FILE", DEFAULT_CONFIG_FILE)]
    for variable in sorted(environ):
        if variable.startswith(PREFIX) and len(variable) > len(PREFIX):
            name = property_name(variable[len(PREFIX) :].lower())
            command += ["--override", f"{name}={environ[variable]}"]
    return command + list(extra)


def main() -> None:
    command = broker_command(os.environ, sys.argv[1:])
    os.execvp(command[0], command)


if __name__ == "__main__":
    main()
