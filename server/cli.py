"""The ``tiercel`` command: ``tiercel broker [CONFIG.yaml] [--override key=value]...``,
``tiercel storage ...`` (`storage_command`) and ``tiercel remote-segments ...``
(`remote_segments_command`).

Each subcommand imports only what it runs, inside its branch of `main`: the broker's
modules take seconds to import on a busy machine, and ``tiercel storage random-uuid``
(or ``format``, run before every KRaft node's first start) needs none of them. Only the
chosen subcommand's arguments are declared, for the same reason (the remote-segments
arguments are checked with the broker's topic-name rules).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Sequence
from importlib.metadata import version
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tiercel.config.broker_config import BrokerConfig
    from tiercel.server.broker_server import BrokerServer
    from tiercel.server.kafka_raft_server import KafkaRaftServer

_COMMANDS = {
    "broker": "run a broker",
    "remote-segments": "list a partition's remote segments from the object store",
    "storage": "format a KRaft node's directories, or show what they hold",
}


def _parser(command: str | None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tiercel", description="A Kafka-compatible broker.")
    parser.add_argument("--version", action="version", version=f"tiercel {version('tiercel')}")
    commands = parser.add_subparsers(dest="command", required=True)
    parsers = {name: commands.add_parser(name, help=text) for name, text in _COMMANDS.items()}
    if command == "broker":
        _add_broker_arguments(parsers[command])
    elif command == "remote-segments":
        from tiercel.server.remote_segments_command import add_remote_segments_arguments

        add_remote_segments_arguments(parsers[command])
    elif command == "storage":
        from tiercel.server.storage_command import add_storage_arguments

        add_storage_arguments(parsers[command])
    return parser


def _add_broker_arguments(broker: argparse.ArgumentParser) -> None:
    broker.add_argument("config", nargs="?", help="YAML file of Kafka broker properties")
    broker.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a property, overriding the file (repeatable)",
    )
    broker.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )


def _chosen_command(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names: its first word that is not an option (the top
    level's only options, --help and --version, take no value)."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


class _WithoutHypothesis(importlib.abc.MetaPathFinder):
    """Finds no ``hypothesis``, so that importing it raises ImportError."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.partition(".")[0] == "hypothesis":
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


def _import_kio_without_hypothesis() -> None:
    """Import kio with Hypothesis hidden, unless either is loaded already (a test
    process calling `main`).

    kio registers a Hypothesis strategy for every one of its phantom types at import when
    hypothesis is importable (kio.static._phantom), and the test dependencies are
    installed beside the broker (make installs '.[test,spark]'): about 0.4 s of every
    start-up, in a process that never runs Hypothesis.
    """
    if "kio" in sys.modules or "hypothesis" in sys.modules:
        return
    finder = _WithoutHypothesis()
    sys.meta_path.insert(0, finder)
    try:
        importlib.import_module("kio.static.primitive")
    finally:
        sys.meta_path.remove(finder)


def main(argv: Sequence[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    _import_kio_without_hypothesis()
    args = _parser(_chosen_command(arguments)).parse_args(arguments)
    if args.command == "remote-segments":
        from tiercel.server.remote_segments_command import run_remote_segments

        return run_remote_segments(args)
    if args.command == "storage":
        from tiercel.server.storage_command import run_storage

        return run_storage(args)
    return _broker(args)


def _broker(args: argparse.Namespace) -> int:
    import logging

    import uvloop

    from tiercel.config.config_def import ConfigError
    from tiercel.config.loader import load_broker_config
    from tiercel.config.logging_setup import configure_logging, log_event

    configure_logging(args.log_level)
    try:
        config = load_broker_config(args.config, args.override)
        server = _server(config)
        load_before_the_loop(config)
        return uvloop.run(_run_broker(server))
    except ConfigError as e:
        print(f"tiercel: configuration error: {e}", file=sys.stderr)
        return 1
    except Exception as e:
        log_event(
            logging.getLogger("tiercel.broker"),
            logging.CRITICAL,
            "startup_failed",
            reason=f"{type(e).__name__}: {e}",
        )
        logging.getLogger("tiercel.broker").debug("traceback", exc_info=e)
        return 1


def load_before_the_loop(config: BrokerConfig | None = None) -> None:
    """Import every schema module, and the tier's RemoteStorageManager when ``config``
    tiers, before the event loop starts, so that neither a request nor the start-up
    waits on an import in the loop; then freeze what start-up loaded (gc.freeze).

    A broker's modules and kio's schemas are some 100,000 objects the cyclic collector
    would otherwise scan in every full collection, for good: each such pause of the
    event loop took 0.17-0.23 s on the loaded 2-core machine, and in a process holding
    them, replaying 100,000 metadata records (a KRaft node catching up) took 1.77 CPU-s
    instead of 1.24 (tests/bench/metadata_replay.py without and with --as-broker,
    median of 3 paired runs). Frozen objects are still freed by their reference counts;
    only cycles among them would stay, and modules are never freed.
    """
    from tiercel.server.kafka_apis import preload_schemas

    preload_schemas()
    if config is not None and config.get("remote.log.storage.system.enable"):
        from tiercel.tiered.rsm.factory import import_remote_storage_manager

        import_remote_storage_manager(str(config.get("remote.log.storage.manager.class.name")))
    gc.freeze()


def _server(config: BrokerConfig) -> BrokerServer | KafkaRaftServer:
    """Kafka's KafkaRaftServer for a node with process.roles, else the broker alone;
    the KRaft modules are imported only by a KRaft node."""
    if config.kraft_mode:
        from tiercel.server.kafka_raft_server import KafkaRaftServer

        return KafkaRaftServer(config)
    from tiercel.server.broker_server import BrokerServer

    return BrokerServer(config)


async def _run_broker(server: BrokerServer | KafkaRaftServer) -> int:
    from tiercel.server.broker_server import install_signal_handlers

    install_signal_handlers(server)
    await server.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
