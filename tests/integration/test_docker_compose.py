"""docker/: the broker image and the three-broker docker-compose cluster.

No Docker engine runs here, so what can be checked without one is checked:

- `docker-compose config` (Debian's docker-compose, installed by tests/install-services.sh)
  accepts docker/docker-compose.yml (skipped without it, a failure under CI);
- the compose file runs ZooKeeper and three brokers, each mounting its
  config/cluster/broker-<n>.yaml, keeping its logs on a named volume, publishing its
  external listener on the host, health-checked, and started only once ZooKeeper is
  healthy;
- the image's entry point turns each broker's environment into the `tiercel broker`
  command line, and that configuration (file plus overrides) loads as the broker would
  load it;
- the image's health check answers 0 for a serving broker and 1 when nothing answers;
- everything the Dockerfile copies exists and is let through by its .dockerignore.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from support.broker import REPO, BrokerProcess
from support.cluster import cluster_config
from support.tools import required_tool
from tiercel.config.loader import load_broker_config
from tiercel.tiered.rsm.factory import create_remote_storage_manager
from tiercel.tiered.rsm.s3_remote_storage import S3RemoteStorageManager

DOCKER = REPO / "docker"
COMPOSE_FILE = DOCKER / "docker-compose.yml"
DOCKERFILE = DOCKER / "Dockerfile"
CONTAINER_CONFIG = "/etc/tiercel/broker.yaml"
NODES = (1, 2, 3)
INTERNAL_PORT = 19092


def _load_module(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


entrypoint = _load_module("tiercel_docker_entrypoint", DOCKER / "entrypoint.py")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    """The compose file as YAML reads it (anchors and merge keys resolved)."""
    document: dict[str, Any] = yaml.safe_load(COMPOSE_FILE.read_text())
    return document


def _broker(compose: dict[str, Any], node: int) -> dict[str, Any]:
    service: dict[str, Any] = compose["services"][f"tiercel-{node}"]
    return service


def _environment(service: dict[str, Any]) -> dict[str, str]:
    return {name: str(value) for name, value in service["environment"].items()}


def test_docker_compose_accepts_the_file() -> None:
    binary = required_tool("docker-compose")
    result = subprocess.run(
        [binary, "-f", str(COMPOSE_FILE), "config", "--quiet"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


def test_zookeeper_an_object_store_and_three_brokers(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert sorted(services) == [
        "minio",
        "minio-init",
        "tiercel-1",
        "tiercel-2",
        "tiercel-3",
        "zookeeper",
    ]
    assert services["zookeeper"]["image"] == "zookeeper:3.8"
    assert "healthcheck" in services["zookeeper"]
    assert "healthcheck" in services["minio"]
    assert services["minio-init"]["depends_on"] == {"minio": {"condition": "service_healthy"}}
    # The bucket the brokers tier to is the one minio-init creates.
    bucket = _environment(_broker(compose, 1))["TIERCEL_CFG_RSM_CONFIG_S3_BUCKET"]
    assert f"mb --ignore-existing tiercel/{bucket}" in services["minio-init"]["entrypoint"][-1]


@pytest.mark.parametrize("node", NODES)
def test_each_broker_service(compose: dict[str, Any], node: int) -> None:
    service = _broker(compose, node)
    assert (DOCKER / service["build"]["context"]).resolve() == REPO
    assert (REPO / service["build"]["dockerfile"]).resolve() == DOCKERFILE
    assert service["depends_on"] == {
        "zookeeper": {"condition": "service_healthy"},
        "minio-init": {"condition": "service_completed_successfully"},
    }
    assert service["healthcheck"]["test"] == [
        "CMD",
        "tiercel-healthcheck",
        f"127.0.0.1:{INTERNAL_PORT}",
    ]
    assert service["ports"] == [f"909{node}:909{node}"]
    mounts = {}
    for volume in service["volumes"]:
        source, target = volume.split(":")[:2]
        mounts[target] = source
    # Its own config file from config/cluster/, and its logs on a named volume.
    assert (DOCKER / mounts[CONTAINER_CONFIG]).resolve() == cluster_config(node)
    assert mounts["/var/lib/tiercel"] in compose["volumes"]
    assert len({_broker(compose, n)["volumes"][1] for n in NODES}) == len(NODES)


def test_entrypoint_execs_tiercel_with_the_environment_as_overrides(
    compose: dict[str, Any], tmp_path: Path
) -> None:
    # A stand-in `tiercel` first on PATH records the command line it was exec'd with.
    argv_file = tmp_path / "argv.json"
    fake = tmp_path / "bin" / "tiercel"
    fake.parent.mkdir()
    fake.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"open({str(argv_file)!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
    )
    fake.chmod(0o755)
    env = {
        "PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}",
        **_environment(_broker(compose, 2)),
        "TIERCEL_CFG_LOG_RETENTION_HOURS": "24",
    }
    result = subprocess.run(
        [sys.executable, str(DOCKER / "entrypoint.py"), "--log-level", "DEBUG"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    argv = json.loads(argv_file.read_text())
    assert argv[:2] == ["broker", CONTAINER_CONFIG]
    assert argv[-2:] == ["--log-level", "DEBUG"]
    overrides = argv[2:-2]
    assert overrides[0::2] == ["--override"] * (len(overrides) // 2)
    assert "listeners=INTERNAL://0.0.0.0:19092,EXTERNAL://0.0.0.0:9092" in overrides
    assert "log.retention.hours=24" in overrides
    assert "zookeeper.connect=zookeeper:2181/tiercel" in overrides


def test_property_names_from_variable_names() -> None:
    assert entrypoint.property_name("log_retention_hours") == "log.retention.hours"
    assert entrypoint.property_name("a__b_c") == "a_b.c"
    command = entrypoint.broker_command(
        {"TIERCEL_CONFIG_FILE": "/x.yaml", "TIERCEL_CFG_NODE_ID": "7", "HOME": "/"}, []
    )
    assert command == ["tiercel", "broker", "/x.yaml", "--override", "node.id=7"]


@pytest.mark.parametrize("node", NODES)
def test_each_broker_configuration_loads_as_the_container_runs_it(
    compose: dict[str, Any], node: int
) -> None:
    command = entrypoint.broker_command(_environment(_broker(compose, node)), [])
    assert command[:3] == ["tiercel", "broker", CONTAINER_CONFIG]
    overrides = command[4::2]
    config = load_broker_config(str(cluster_config(node)), overrides)
    assert config.node_id == node
    assert config.zookeeper_connect == "zookeeper:2181/tiercel"
    assert config.log_dirs == ["/var/lib/tiercel/data"]
    assert {str(listener) for listener in config.advertised_listeners} == {
        f"INTERNAL://tiercel-{node}:{INTERNAL_PORT}",
        f"EXTERNAL://localhost:909{node}",
    }
    assert config.get("inter.broker.listener.name") == "INTERNAL"
    # Tiering to the compose file's object store: the S3 RemoteStorageManager accepts its
    # rsm.config. properties (building it opens no connection).
    assert config.get("remote.log.storage.system.enable") is True
    rsm = create_remote_storage_manager(
        str(config.get("remote.log.storage.manager.class.name")),
        config.remote_storage_manager_props(),
        "/unused",
    )
    try:
        assert isinstance(rsm, S3RemoteStorageManager)
    finally:
        rsm.close()


def test_healthcheck_passes_for_a_serving_broker_only(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory({"offsets.topic.replication.factor": 1})
    command = [sys.executable, str(DOCKER / "healthcheck.py")]
    healthy = subprocess.run(
        [*command, broker.bootstrap], capture_output=True, text=True, timeout=30
    )
    assert healthy.returncode == 0, healthy.stderr
    broker.kill()
    down = subprocess.run([*command, broker.bootstrap], capture_output=True, text=True, timeout=30)
    assert down.returncode == 1
    assert "ConnectionRefusedError" in down.stderr


def _dockerfile_instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    instructions = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            instructions.append((keyword.upper(), rest.strip()))
    return instructions


def test_dockerfile_builds_a_non_root_python_image() -> None:
    instructions = _dockerfile_instructions()
    assert instructions[0] == ("FROM", "python:3.11-slim")
    values = dict(instructions)
    assert values["USER"] not in ("root", "0")
    assert values["ENTRYPOINT"] == '["tiercel-docker-entrypoint"]'
    assert "tiercel-healthcheck" in values["HEALTHCHECK"]
    assert values["EXPOSE"] == "9092"


def test_dockerfile_copies_only_files_that_exist_and_are_not_ignored() -> None:
    ignore = (DOCKER / "Dockerfile.dockerignore").read_text().splitlines()
    let_through = [line[1:].rstrip("/") for line in ignore if line.startswith("!")]
    assert ignore[ignore.index("*") + 1 :], "the ignore file must start by ignoring everything"
    for keyword, rest in _dockerfile_instructions():
        if keyword != "COPY":
            continue
        sources = rest.split()[:-1]
        for source in sources:
            assert (REPO / source).exists(), source
            assert any(
                source == allowed or source.startswith(allowed + "/") for allowed in let_through
            ), f"{source} is copied but .dockerignore leaves it out of the build context"
