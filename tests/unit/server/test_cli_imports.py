"""What a ``tiercel`` process imports: each subcommand only what it runs, the broker's
modules only for ``tiercel broker``, boto3 only for the S3 tier, a KRaft node's modules
only with process.roles, and kio
without Hypothesis (installed beside the broker as a test dependency); what the broker
loads before its event loop is frozen out of the cyclic collector's sight.

Each case runs in a fresh interpreter, as the ``tiercel`` entry point does, and prints
which of the watched modules got imported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Final

import pytest

WATCHED: Final = (
    "boto3",
    "hypothesis",
    "tiercel.server.broker_server",
    "tiercel.server.kafka_raft_server",
    "tiercel.server.metadata.bootstrap_directory",
    "tiercel.server.raft.kafka_raft_client",
)
CLUSTER_ID: Final = "MkU3OEVBNTcwNTJENDM2Qg"


def imported_after(code: str) -> set[str]:
    """The watched modules imported once ``code`` has run in a new interpreter."""
    script = (
        f"import json, sys\n{code}\nprint(json.dumps([m for m in {WATCHED!r} if m in sys.modules]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_random_uuid_imports_none_of_the_broker() -> None:
    code = "from tiercel.server.cli import main\nmain(['storage', 'random-uuid'])"
    assert imported_after(code) == set()


def test_format_imports_the_bootstrap_writer_only(tmp_path: Path) -> None:
    overrides = {
        "process.roles": "broker,controller",
        "controller.quorum.voters": "1@127.0.0.1:9093",
        "controller.listener.names": "CONTROLLER",
        "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
        "log.dirs": str(tmp_path),
    }
    argv = ["storage", "format", "-t", CLUSTER_ID]
    argv += [a for key, value in overrides.items() for a in ("--override", f"{key}={value}")]
    code = f"from tiercel.server.cli import main\nassert main({argv!r}) == 0"
    assert imported_after(code) == {"tiercel.server.metadata.bootstrap_directory"}
    assert (tmp_path / "meta.properties").exists()


def test_kio_is_imported_without_hypothesis_and_hypothesis_still_imports() -> None:
    code = (
        "from tiercel.server.cli import _import_kio_without_hypothesis\n"
        "_import_kio_without_hypothesis()\n"
        "import kio.static._phantom\n"
        "assert kio.static._phantom.hypothesis is None\n"
        "import hypothesis"
    )
    assert imported_after(code) == {"hypothesis"}


@pytest.mark.parametrize(
    ("server", "expected"),
    [
        # A broker without process.roles: neither the KRaft node nor boto3.
        ("broker_server", {"tiercel.server.broker_server"}),
        # A KRaft node: its own modules, still no boto3.
        (
            "kafka_raft_server",
            {
                "tiercel.server.broker_server",
                "tiercel.server.kafka_raft_server",
                "tiercel.server.metadata.bootstrap_directory",
                "tiercel.server.raft.kafka_raft_client",
            },
        ),
    ],
)
def test_a_broker_imports_its_mode_only(server: str, expected: set[str]) -> None:
    code = (
        "from tiercel.server.cli import _import_kio_without_hypothesis\n"
        "_import_kio_without_hypothesis()\n"
        f"import tiercel.server.{server}\n"
        "from tiercel.server.kafka_apis import preload_schemas\n"
        "preload_schemas()"
    )
    assert imported_after(code) == expected


def test_boto3_only_for_the_s3_tier(tmp_path: Path) -> None:
    code = (
        "from tiercel.tiered.rsm.factory import create_remote_storage_manager as create\n"
        f"create('local', {{}}, {str(tmp_path)!r})\n"
        "assert 'boto3' not in sys.modules\n"
        "create('s3', {'s3.bucket': 'b', 's3.region': 'x'}, '')"
    )
    assert "boto3" in imported_after(code)


def test_what_start_up_loaded_is_frozen_before_the_loop() -> None:
    # Out of the cyclic collector's sight: every schema module a broker serves, and the
    # modules imported before them.
    code = (
        "import gc\n"
        "from tiercel.server.cli import load_before_the_loop\n"
        "load_before_the_loop()\n"
        "assert gc.get_freeze_count() > 50_000, gc.get_freeze_count()"
    )
    imported_after(code)


@pytest.mark.parametrize(
    ("settings", "boto3_loaded"),
    [
        (
            {
                "remote.log.storage.system.enable": True,
                "remote.log.storage.manager.class.name": "s3",
            },
            True,
        ),
        ({"remote.log.storage.system.enable": True}, False),
        ({"remote.log.storage.manager.class.name": "s3"}, False),
    ],
)
def test_a_broker_tiering_to_s3_imports_boto3_before_the_loop(
    settings: dict[str, object], boto3_loaded: bool
) -> None:
    # Imported in the event loop, at start-up, boto3 held it for over a second on the
    # loaded 2-core machine (the cluster tests' blocked-loop check).
    code = (
        "from tiercel.config.broker_config import BrokerConfig\n"
        "from tiercel.server.cli import load_before_the_loop\n"
        f"load_before_the_loop(BrokerConfig({settings!r}))"
    )
    assert ("boto3" in imported_after(code)) is boto3_loaded
