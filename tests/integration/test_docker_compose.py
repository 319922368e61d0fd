"""docker/: the broker image and the three-node KRaft docker-compose cluster.

No Docker engine runs here, so what can be checked without one is checked:

- `docker-compose config` (Debian's docker-compose, installed by tests/install-services.sh)
  accepts docker/docker-compose.yml (skipped without it, a failure under CI) and puts
  CLUSTER_ID, its default or the one the shell sets, in every node's environment;
- the compose file runs MinIO and three combined KRaft nodes and no ZooKeeper, each node
  mounting its config/kraft/node-<n>.yaml, keeping its logs on a named volume,
  publishing its external listener on the host, health-checked, and depending on no
  other node;
- the image's entry point formats an unformatted KRaft node (`tiercel storage format
  --ignore-formatted` with CLUSTER_ID, the same file and overrides) and then turns its
  environment into the `tiercel broker` command line; its decisions one by one (not
  KRaft, every directory formatted, unformatted with or without CLUSTER_ID, a volume of
  another cluster or node); and that configuration (file plus overrides) loads as the
  node would load it;
- end to end, the entry point itself starts three nodes as the compose file configures
  them, with addresses on 127.0.0.1: they format their empty volumes, elect a quorum and
  serve an RF=3 topic, and a node started again formats nothing;
- the image's health check answers 0 for a serving broker and 1 when nothing answers;
- everything the Dockerfile copies exists and is let through by its .dockerignore.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, Final

import pytest
import yaml
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from support.broker import REPO, TIERCEL, BrokerProcess
from support.clients import Outgoing, consume, produce, round_trip
from support.kraft import controller_ports
from support.ports import free_port
from support.tools import required_tool
from tiercel.config.loader import load_broker_config
from tiercel.storage.checkpoint_file import kafka_str_to_uuid, uuid_to_kafka_str
from tiercel.storage.meta_properties import MetaProperties
from tiercel.storage.meta_properties_ensemble import MetaPropertiesError
from tiercel.tiered.rsm.factory import create_remote_storage_manager
from tiercel.tiered.rsm.s3_remote_storage import S3RemoteStorageManager

DOCKER = REPO / "docker"
COMPOSE_FILE = DOCKER / "docker-compose.yml"
SASL_SSL_FILE = DOCKER / "docker-compose.sasl-ssl.yml"
DOCKERFILE = DOCKER / "Dockerfile"
KRAFT_CONFIG_DIR = REPO / "config" / "kraft"
CONTAINER_CONFIG = "/etc/tiercel/broker.yaml"
NODES = (1, 2, 3)
INTERNAL_PORT = 19092
CONTROLLER_PORT = 19093
# The id the compose file gives CLUSTER_ID when the shell does not set it.
DEFAULT_CLUSTER_ID: Final = "5OtzSzzBQr-msyMAve4yIw"
VOTERS: Final = ",".join(f"{n}@tiercel-{n}:{CONTROLLER_PORT}" for n in NODES)


def _load_module(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


entrypoint = _load_module("tiercel_docker_entrypoint", DOCKER / "entrypoint.py")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    """The compose file as YAML reads it (anchors and merge keys resolved; variables
    such as ${CLUSTER_ID:-...} left as written)."""
    document: dict[str, Any] = yaml.safe_load(COMPOSE_FILE.read_text())
    return document


def _node(compose: dict[str, Any], node: int) -> dict[str, Any]:
    service: dict[str, Any] = compose["services"][f"tiercel-{node}"]
    return service


def _environment(service: dict[str, Any]) -> dict[str, str]:
    return {name: str(value) for name, value in service["environment"].items()}


def _container_environment(compose: dict[str, Any], node: int) -> dict[str, str]:
    """The node's environment as docker-compose gives it to the container (CLUSTER_ID
    at its default)."""
    return {**_environment(_node(compose, node)), "CLUSTER_ID": DEFAULT_CLUSTER_ID}


def _volume(root: Path) -> dict[str, str]:
    """The node's directories under ``root`` as the container has them under its volume
    (/var/lib/tiercel)."""
    return {
        "TIERCEL_CFG_LOG_DIRS": str(root / "data"),
        "TIERCEL_CFG_METADATA_LOG_DIR": str(root / "metadata"),
    }


def kraft_config(node: int) -> Path:
    return KRAFT_CONFIG_DIR / f"node-{node}.yaml"


def _compose_config(cluster_id: str | None) -> dict[str, Any]:
    binary = required_tool("docker-compose")
    env = {k: v for k, v in os.environ.items() if k != "CLUSTER_ID"}
    if cluster_id is not None:
        env["CLUSTER_ID"] = cluster_id
    result = subprocess.run(
        [binary, "-f", str(COMPOSE_FILE), "config"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    resolved: dict[str, Any] = yaml.safe_load(result.stdout)
    return resolved


def test_docker_compose_accepts_the_file_and_sets_cluster_id() -> None:
    for given, expected in ((None, DEFAULT_CLUSTER_ID), ("q1Sh5BnvRKyWE8q3v9oTXw",) * 2):
        services = _compose_config(given)["services"]
        for node in NODES:
            assert services[f"tiercel-{node}"]["environment"]["CLUSTER_ID"] == expected


def test_an_object_store_and_three_kraft_nodes_without_zookeeper(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    assert sorted(services) == ["minio", "minio-init", "tiercel-1", "tiercel-2", "tiercel-3"]
    assert sorted(compose["volumes"]) == [
        "minio-data",
        "tiercel-1-data",
        "tiercel-2-data",
        "tiercel-3-data",
    ]
    assert "healthcheck" in services["minio"]
    assert services["minio-init"]["depends_on"] == {"minio": {"condition": "service_healthy"}}
    # The bucket the nodes tier to is the one minio-init creates.
    bucket = _environment(_node(compose, 1))["TIERCEL_CFG_RSM_CONFIG_S3_BUCKET"]
    assert f"mb --ignore-existing tiercel/{bucket}" in services["minio-init"]["entrypoint"][-1]
    # One default cluster id, a valid one (`tiercel storage random-uuid` made it).
    for node in NODES:
        assert _environment(_node(compose, node))["CLUSTER_ID"] == (
            f"${{CLUSTER_ID:-{DEFAULT_CLUSTER_ID}}}"
        )
    assert uuid_to_kafka_str(kafka_str_to_uuid(DEFAULT_CLUSTER_ID)) == DEFAULT_CLUSTER_ID


@pytest.mark.parametrize("node", NODES)
def test_each_node_service(compose: dict[str, Any], node: int) -> None:
    service = _node(compose, node)
    assert (DOCKER / service["build"]["context"]).resolve() == REPO
    assert (REPO / service["build"]["dockerfile"]).resolve() == DOCKERFILE
    # The voters start together: a node waits for no other, only for the bucket.
    assert service["depends_on"] == {
        "minio-init": {"condition": "service_completed_successfully"},
    }
    assert service["healthcheck"]["test"] == [
        "CMD",
        "tiercel-healthcheck",
        f"127.0.0.1:{INTERNAL_PORT}",
    ]
    assert service["stop_grace_period"] == "60s"
    assert service["ports"] == [f"909{node}:909{node}"]
    mounts = {}
    for volume in service["volumes"]:
        source, target = volume.split(":")[:2]
        mounts[target] = source
    # Its own config file from config/kraft/, and its logs on a named volume.
    assert (DOCKER / mounts[CONTAINER_CONFIG]).resolve() == kraft_config(node)
    assert mounts["/var/lib/tiercel"] in compose["volumes"]
    assert len({_node(compose, n)["volumes"][1] for n in NODES}) == len(NODES)


def _fake_tiercel(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """A stand-in `tiercel` first on PATH that appends each command line it is run with
    to a file; the PATH entry and that file."""
    argv_file = tmp_path / "argv.jsonl"
    fake = tmp_path / "bin" / "tiercel"
    fake.parent.mkdir()
    fake.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"open({str(argv_file)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
    )
    fake.chmod(0o755)
    return {"PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}"}, argv_file


def _run_entrypoint(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(DOCKER / "entrypoint.py"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_entrypoint_formats_then_execs_tiercel_with_the_environment_as_overrides(
    compose: dict[str, Any], tmp_path: Path
) -> None:
    path, argv_file = _fake_tiercel(tmp_path)
    env = {
        **path,
        **_container_environment(compose, 2),
        # The container's file, and its volume under this test's directory.
        "TIERCEL_CONFIG_FILE": str(kraft_config(2)),
        **_volume(tmp_path / "volume"),
        "TIERCEL_CFG_LOG_RETENTION_HOURS": "24",
    }
    result = _run_entrypoint(env, "--log-level", "DEBUG")
    assert result.returncode == 0, result.stderr
    storage, broker = (json.loads(line) for line in argv_file.read_text().splitlines())
    overrides = broker[2:-2]
    assert broker[:2] == ["broker", str(kraft_config(2))]
    assert broker[-2:] == ["--log-level", "DEBUG"]
    assert overrides[0::2] == ["--override"] * (len(overrides) // 2)
    assert (
        "listeners=INTERNAL://0.0.0.0:19092,EXTERNAL://0.0.0.0:9092,CONTROLLER://tiercel-2:19093"
        in overrides
    )
    assert f"controller.quorum.voters={VOTERS}" in overrides
    assert "log.retention.hours=24" in overrides
    assert not any(o.startswith("zookeeper.") for o in overrides)
    # First the format, of the same file with the same overrides.
    assert storage == [
        "storage",
        "format",
        "-t",
        DEFAULT_CLUSTER_ID,
        str(kraft_config(2)),
        *overrides,
        "--ignore-formatted",
    ]

    # Once formatted (the stand-in did not), a start runs the broker alone; a CLUSTER_ID
    # of another cluster stops it before anything runs.
    for directory in ("data", "metadata"):
        (tmp_path / "volume" / directory).mkdir(parents=True)
        MetaProperties(DEFAULT_CLUSTER_ID, 2, None).write(str(tmp_path / "volume" / directory))
    argv_file.unlink()
    assert _run_entrypoint(env).returncode == 0
    assert [json.loads(line)[0] for line in argv_file.read_text().splitlines()] == ["broker"]
    argv_file.unlink()
    refused = _run_entrypoint({**env, "CLUSTER_ID": "q1Sh5BnvRKyWE8q3v9oTXw"})
    assert refused.returncode == 1
    assert "Invalid cluster.id in: " in refused.stderr
    assert not argv_file.exists()


def test_entrypoint_stops_on_an_unformatted_volume_without_cluster_id(
    compose: dict[str, Any], tmp_path: Path
) -> None:
    path, argv_file = _fake_tiercel(tmp_path)
    volume = tmp_path / "volume"
    env = {
        **path,
        **_environment(_node(compose, 1)),
        "TIERCEL_CONFIG_FILE": str(kraft_config(1)),
        **_volume(volume),
    }
    del env["CLUSTER_ID"]
    result = _run_entrypoint(env)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"tiercel-docker-entrypoint: {volume}/data, {volume}/metadata not formatted (no "
        "meta.properties) and CLUSTER_ID is not set: set CLUSTER_ID to the cluster's id, "
        "the same on every node (`tiercel storage random-uuid` makes a new one), and the "
        "volume is formatted on this start"
    )
    assert not argv_file.exists(), "neither format nor broker may run"


def test_property_names_from_variable_names() -> None:
    assert entrypoint.property_name("log_retention_hours") == "log.retention.hours"
    assert entrypoint.property_name("a__b_c") == "a_b.c"
    environ = {"TIERCEL_CONFIG_FILE": "/x.yaml", "TIERCEL_CFG_NODE_ID": "7", "HOME": "/"}
    command = entrypoint.broker_command(environ, [])
    assert command == ["tiercel", "broker", "/x.yaml", "--override", "node.id=7"]
    assert entrypoint.format_command(environ, "c") == [
        *("tiercel", "storage", "format", "-t", "c", "/x.yaml"),
        *("--override", "node.id=7", "--ignore-formatted"),
    ]


def test_format_step_decisions() -> None:
    environ = {"TIERCEL_CONFIG_FILE": "/x.yaml", "CLUSTER_ID": "c"}
    step = entrypoint.format_step
    # Without process.roles nothing is formatted, CLUSTER_ID or not.
    assert step(environ, False, {"/d"}) is None
    assert step({}, False, {"/d"}) is None
    # A KRaft node with a directory to format is formatted with CLUSTER_ID.
    assert step(environ, True, {"/d"}) == entrypoint.format_command(environ, "c")
    # Every directory formatted: nothing to run, CLUSTER_ID or not.
    assert step(environ, True, set()) is None
    assert step({}, True, set()) is None
    # Something to format and no CLUSTER_ID (or a blank one): the node cannot start.
    for without in ({}, {"CLUSTER_ID": " "}):
        with pytest.raises(entrypoint.NotFormattedError, match=r"^/a, /b not formatted"):
            step(without, True, {"/b", "/a"})


def test_node_storage_reads_roles_and_unformatted_directories(tmp_path: Path) -> None:
    data, metadata = tmp_path / "data", tmp_path / "metadata"
    environ = {"TIERCEL_CONFIG_FILE": str(kraft_config(1)), **_volume(tmp_path)}
    assert entrypoint.node_storage(environ) == (True, {str(data), str(metadata)})
    metadata.mkdir()
    MetaProperties(DEFAULT_CLUSTER_ID, 1, None).write(str(metadata))
    assert entrypoint.node_storage(environ) == (True, {str(data)})
    assert entrypoint.node_storage({**environ, "CLUSTER_ID": DEFAULT_CLUSTER_ID}) == (
        True,
        {str(data)},
    )
    # A formatted directory of another cluster or node stops the container, with the
    # messages of Kafka's MetaPropertiesEnsemble.verify.
    other = "q1Sh5BnvRKyWE8q3v9oTXw"
    with pytest.raises(
        MetaPropertiesError,
        match="^"
        + re.escape(
            f"Invalid cluster.id in: {metadata}/meta.properties. Expected {other}, but read "
            f"{DEFAULT_CLUSTER_ID}"
        )
        + "$",
    ):
        entrypoint.node_storage({**environ, "CLUSTER_ID": other})
    with pytest.raises(MetaPropertiesError, match=r"^Stored node id 1 doesn't match"):
        entrypoint.node_storage({**environ, "TIERCEL_CFG_NODE_ID": "2"})
    # The roles may come from the environment alone.
    single = {
        "TIERCEL_CONFIG_FILE": str(REPO / "config" / "single-node.yaml"),
        "TIERCEL_CFG_LOG_DIRS": str(data),
    }
    assert entrypoint.node_storage(single) == (False, frozenset())
    voter = {
        **single,
        "TIERCEL_CFG_PROCESS_ROLES": "broker,controller",
        "TIERCEL_CFG_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "TIERCEL_CFG_CONTROLLER_QUORUM_VOTERS": "1@127.0.0.1:9093",
        "TIERCEL_CFG_LISTENERS": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
        "TIERCEL_CFG_NODE_ID": "1",
    }
    assert entrypoint.node_storage(voter) == (True, {str(data)})


@pytest.mark.parametrize("node", NODES)
def test_each_node_configuration_loads_as_the_container_runs_it(
    compose: dict[str, Any], node: int
) -> None:
    environ = _container_environment(compose, node)
    command = entrypoint.broker_command(environ, [])
    assert command[:3] == ["tiercel", "broker", CONTAINER_CONFIG]
    config = load_broker_config(str(kraft_config(node)), command[4::2])
    assert config.node_id == node
    assert config.process_roles == {"broker", "controller"}
    assert [(v.node_id, v.host, v.port) for v in config.quorum_voters] == [
        (n, f"tiercel-{n}", CONTROLLER_PORT) for n in NODES
    ]
    assert config.controller_listener_names == ("CONTROLLER",)
    assert {str(listener) for listener in config.listeners} == {
        f"INTERNAL://0.0.0.0:{INTERNAL_PORT}",
        f"EXTERNAL://0.0.0.0:909{node}",
        f"CONTROLLER://tiercel-{node}:{CONTROLLER_PORT}",
    }
    assert config.log_dirs == ["/var/lib/tiercel/data"]
    assert config.metadata_log_dir == "/var/lib/tiercel/metadata"
    assert {str(listener) for listener in config.advertised_listeners} == {
        f"INTERNAL://tiercel-{node}:{INTERNAL_PORT}",
        f"EXTERNAL://localhost:909{node}",
    }
    assert config.get("inter.broker.listener.name") == "INTERNAL"
    # The example files' durability and failure detection.
    assert config.default_replication_factor == 3
    assert config.get("min.insync.replicas") == 2
    assert config.unclean_leader_election_enable is False
    assert config.broker_session_timeout_ms == 9000
    assert config.get("broker.heartbeat.interval.ms") == 2000
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


@pytest.mark.parametrize("node", NODES)
def test_each_example_file_runs_on_one_machine_as_written(node: int) -> None:
    config = load_broker_config(str(kraft_config(node)), [])
    assert config.node_id == node
    assert [(v.node_id, v.host, v.port) for v in config.quorum_voters] == [
        (n, "127.0.0.1", 9190 + n) for n in NODES
    ]
    assert {str(listener) for listener in config.listeners} == {
        f"PLAINTEXT://127.0.0.1:909{node}",
        f"CONTROLLER://127.0.0.1:919{node}",
    }
    assert config.log_dirs == [f"./data/node-{node}"]
    assert config.metadata_log_dir == f"./data/node-{node}-metadata"


class EntrypointNode(BrokerProcess):
    """A node started as its container starts it: docker/entrypoint.py with the compose
    file's environment, the addresses moved to 127.0.0.1 ports and the volume to a test
    directory; the entry point formats, then execs the real `tiercel broker`."""

    def __init__(self, data_dir: Path, environment: dict[str, str], external_port: int) -> None:
        super().__init__(data_dir)
        self.env = environment
        self.external_port = external_port

    def command(self) -> list[str]:
        return [sys.executable, str(DOCKER / "entrypoint.py")]

    def wait_started(self, timeout: float = 30.0) -> BrokerProcess:
        """The listeners are named as in the compose file (no PLAINTEXT to read a port
        from): wait for the broker's start line, the port is known."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while "event=broker_started" not in self._this_run_log():
            if self.proc.poll() is not None:
                raise RuntimeError(f"node exited with {self.proc.returncode}:\n{self.tail()}")
            if time.monotonic() > deadline:
                self.kill()
                raise TimeoutError(f"node did not start in {timeout}s:\n{self.tail()}")
            time.sleep(0.05)
        self.port = self.external_port
        return self

    def this_run_log(self) -> str:
        return self._this_run_log()

    @property
    def volume(self) -> Path:
        """What the container mounts at /var/lib/tiercel."""
        return Path(self.env["TIERCEL_CFG_LOG_DIRS"]).parent

    def meta_properties(self) -> dict[str, bytes]:
        """Each directory's meta.properties file as it is on disk."""
        return {d: (self.volume / d / "meta.properties").read_bytes() for d in ("data", "metadata")}


def _local_nodes(
    tmp_path: Path, environment_of: Callable[[int], dict[str, str]]
) -> list[EntrypointNode]:
    """Three entry point processes (not started) with the containers' environments
    (``environment_of(node)``), the addresses moved to 127.0.0.1 ports and the volumes
    to directories of ``tmp_path``."""
    controllers = controller_ports(list(NODES))
    voters = ",".join(f"{n}@127.0.0.1:{port}" for n, port in controllers.items())
    nodes = []
    for node in NODES:
        internal, external = free_port(), free_port()
        env = {
            **os.environ,
            # `tiercel` is this checkout's, as the image's is on its PATH.
            "PATH": f"{TIERCEL.parent}{os.pathsep}{os.environ['PATH']}",
            **environment_of(node),
            "TIERCEL_CONFIG_FILE": str(kraft_config(node)),
            "TIERCEL_CFG_LISTENERS": f"INTERNAL://127.0.0.1:{internal},"
            f"EXTERNAL://127.0.0.1:{external},CONTROLLER://127.0.0.1:{controllers[node]}",
            "TIERCEL_CFG_ADVERTISED_LISTENERS": f"INTERNAL://127.0.0.1:{internal},"
            f"EXTERNAL://127.0.0.1:{external}",
            "TIERCEL_CFG_CONTROLLER_QUORUM_VOTERS": voters,
            **_volume(tmp_path / f"tiercel-{node}-data"),
            # No object store here: the tiering settings are checked above.
            "TIERCEL_CFG_REMOTE_LOG_STORAGE_SYSTEM_ENABLE": "false",
            # 50 partitions times three replicas is a lot of start-up for a test cluster.
            "TIERCEL_CFG_OFFSETS_TOPIC_NUM_PARTITIONS": "5",
        }
        nodes.append(EntrypointNode(tmp_path / f"tiercel-{node}", env, external))
    return nodes


@pytest.fixture
def entrypoint_nodes(compose: dict[str, Any], tmp_path: Path) -> Iterator[list[EntrypointNode]]:
    """The compose file's three nodes as entry point processes (not started)."""
    nodes = _local_nodes(tmp_path, lambda node: _container_environment(compose, node))
    yield nodes
    for n in nodes:
        n.kill()


def _start_together(nodes: list[EntrypointNode]) -> None:
    # As `docker-compose up`: no node waits for another before it starts.
    for node in nodes:
        node.launch()
    for node in nodes:
        node.wait_started(60)


def test_the_entrypoint_formats_three_nodes_once_and_they_form_a_cluster(
    entrypoint_nodes: list[EntrypointNode],
) -> None:
    nodes = entrypoint_nodes
    _start_together(nodes)
    for node in nodes:
        for kind in ("data", "metadata"):
            formatting = f"Formatting {kind} directory {node.volume / kind} with metadata.version"
            assert formatting in node.log_text()
            meta = MetaProperties.read(str(node.volume / kind))
            assert meta is not None and meta.cluster_id == DEFAULT_CLUSTER_ID
    # The compose file's health check passes on the internal listener.
    internal = nodes[0].env["TIERCEL_CFG_LISTENERS"].split(",")[0].rpartition("/")[2]
    health = subprocess.run(
        [sys.executable, str(DOCKER / "healthcheck.py"), internal], timeout=30, check=False
    )
    assert health.returncode == 0
    bootstrap = ",".join(n.bootstrap for n in nodes)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("events", 3, 3)])["events"].result(60)
    records = [Outgoing(i % 3, b"v%d" % i) for i in range(90)]
    produce("confluent", bootstrap, "events", records)
    partitions = admin.list_topics("events", timeout=10).topics["events"].partitions
    assert all(sorted(p.replicas) == [1, 2, 3] for p in partitions.values())
    consumed = consume("confluent", bootstrap, "events", 90, partitions=(0, 1, 2))
    assert sorted(consumed.values()) == sorted(r.value for r in records)

    # A second start of a node's volume (a clean stop, as `docker-compose restart`)
    # formats nothing and keeps the node's identity; it serves again.
    node = nodes[0]
    before = node.meta_properties()
    assert node.stop() == 0
    node.start(60)
    assert "Formatting" not in node.this_run_log()
    assert node.meta_properties() == before
    consumed = consume("confluent", node.bootstrap, "events", 90, partitions=(0, 1, 2))
    assert sorted(consumed.values()) == sorted(r.value for r in records)


def _sasl_ssl_compose() -> dict[str, Any]:
    """docker-compose.yml with docker-compose.sasl-ssl.yml layered on, as `docker-compose
    config` resolves them (the password variables at their defaults)."""
    binary = required_tool("docker-compose")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("CLUSTER_ID", "BROKER_PASSWORD", "CLIENT_PASSWORD")
    }
    result = subprocess.run(
        [binary, "-f", str(COMPOSE_FILE), "-f", str(SASL_SSL_FILE), "config"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    resolved: dict[str, Any] = yaml.safe_load(result.stdout)
    return resolved


def test_the_sasl_ssl_overlay_secures_every_listener_of_every_node() -> None:
    services = _sasl_ssl_compose()["services"]
    for node in NODES:
        service = services[f"tiercel-{node}"]
        env = _environment(service)
        assert env["TIERCEL_CFG_LISTENER_SECURITY_PROTOCOL_MAP"] == (
            "INTERNAL:SASL_SSL,EXTERNAL:SASL_SSL,CONTROLLER:SSL"
        )
        assert env["TIERCEL_CFG_SSL_KEYSTORE_LOCATION"] == f"/etc/tiercel/certs/tiercel-{node}.pem"
        # The base file's settings are kept under the overlay's.
        assert env["TIERCEL_CFG_INTER_BROKER_LISTENER_NAME"] == "INTERNAL"
        assert env["CLUSTER_ID"] == DEFAULT_CLUSTER_ID
        mounts = {v.split(":")[1]: v.split(":")[0] for v in service["volumes"]}
        assert Path(mounts["/etc/tiercel/certs"]) == DOCKER / "certs"
        assert service["healthcheck"]["test"] == [
            "CMD",
            "tiercel-healthcheck",
            "--ssl-ca",
            "/etc/tiercel/certs/ca.pem",
            f"127.0.0.1:{INTERNAL_PORT}",
        ]


def test_the_sasl_ssl_example_runs_with_certificates_made_by_its_script(tmp_path: Path) -> None:
    """make-certs.sh's certificates, the overlay's environment, three entry point
    processes: the nodes elect a quorum over mutual TLS, replicate over SASL_SSL as
    `broker`, and serve a client logged in as `client` over SASL_SSL."""
    certs = tmp_path / "certs"
    made = subprocess.run(
        ["sh", str(DOCKER / "make-certs.sh"), str(certs)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    assert sorted(p.name for p in certs.iterdir()) == [
        "ca.key",
        "ca.pem",
        "tiercel-1.pem",
        "tiercel-2.pem",
        "tiercel-3.pem",
    ]
    services = _sasl_ssl_compose()["services"]

    def environment_of(node: int) -> dict[str, str]:
        env = _environment(services[f"tiercel-{node}"])
        return {k: v.replace("/etc/tiercel/certs", str(certs)) for k, v in env.items()}

    nodes = _local_nodes(tmp_path, environment_of)
    try:
        _start_together(nodes)
        internal = nodes[0].env["TIERCEL_CFG_LISTENERS"].split(",")[0].rpartition("/")[2]
        health = [sys.executable, str(DOCKER / "healthcheck.py")]
        ca = str(certs / "ca.pem")
        assert subprocess.run([*health, "--ssl-ca", ca, internal], timeout=30).returncode == 0
        # A health check that does not speak TLS gets no answer from a TLS listener.
        assert subprocess.run([*health, internal], timeout=30).returncode == 1
        client = {
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": ca,
            "sasl.mechanism": "PLAIN",
            "sasl.username": "client",
            "sasl.password": "client-secret",
        }
        bootstrap = ",".join(n.bootstrap for n in nodes)
        admin = AdminClient({"bootstrap.servers": bootstrap, **client})
        admin.create_topics([NewTopic("secured", 1, 3)])["secured"].result(60)
        round_trip({"bootstrap.servers": bootstrap, **client}, "secured", count=30)
    finally:
        for node in nodes:
            node.kill()


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
