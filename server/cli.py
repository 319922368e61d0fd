"""The ``tiercel`` command: ``tiercel broker [CONFIG.yaml] [--override key=value]...``,
``tiercel storage ...`` (`storage_command`) and ``tiercel remote-segments ...``
(`remote_segments_command`)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from importlib.metadata import version

import uvloop

from tiercel.config.broker_config import BrokerConfig
from tiercel.config.config_def import ConfigError
from tiercel.config.loader import load_broker_config
from tiercel.config.logging_setup import configure_logging, log_event
from tiercel.server.broker_server import BrokerServer, install_signal_handlers
from tiercel.server.kafka_apis import preload_schemas
from tiercel.server.kafka_raft_server import KafkaRaftServer
from tiercel.server.remote_segments_command import (
    add_remote_segments_parser,
    run_remote_segments,
)
from tiercel.server.storage_command import add_storage_parser, run_storage


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tiercel", description="A Kafka-compatible broker.")
    parser.add_argument("--version", action="version", version=f"tiercel {version('tiercel')}")
    commands = parser.add_subparsers(dest="command", required=True)
    broker = commands.add_parser("broker", help="run a broker")
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
    add_remote_segments_parser(commands)
    add_storage_parser(commands)
    return parser


async def _run_broker(config: BrokerConfig) -> int:
    server: BrokerServer | KafkaRaftServer = (
        KafkaRaftServer(config) if config.kraft_mode else BrokerServer(config)
    )
    install_signal_handlers(server)
    await server.run()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "remote-segments":
        return run_remote_segments(args)
    if args.command == "storage":
        return run_storage(args)
    configure_logging(args.log_level)
    try:
        config = load_broker_config(args.config, args.override)
        # Every schema module is imported before the event loop starts, so that no
        # request ever waits on an import.
        preload_schemas()
        return uvloop.run(_run_broker(config))
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


if __name__ == "__main__":
    sys.exit(main())
