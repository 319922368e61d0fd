"""KRaft nodes of real processes for the KRaft tests: each node's directories formatted
with `tiercel storage format`, as a user formats them, then started with `tiercel
broker`. Controller listeners get free ports picked before the start, since every
voter's address goes into controller.quorum.voters (or, for a dynamic quorum, into
controller.quorum.bootstrap.servers and the format command's --initial-controllers);
broker listeners bind port 0 and keep their port across restarts (`BrokerProcess`)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from support.broker import TIERCEL, BrokerProcess
from support.ports import free_port
from tiercel.server.replication.broker_client import BrokerClient

CLUSTER_ID: Final = "MkU3OEVBNTcwNTJENDM2Qg"


# DescribeQuorum v2 of the metadata partition (what kafka-metadata-quorum sends).
DESCRIBE_QUORUM: Final = 55
DESCRIBE_QUORUM_VERSIONS: Final = (2, 2)
DESCRIBE_QUORUM_BODY: Final = {
    "topics": [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]
}


def request(
    address: str, api_key: int, versions: tuple[int, int], body: Any, timeout_s: float = 10.0
) -> Any:
    """One request to ``address`` (host:port) on a connection of its own; the kio
    response. Connection failures and timeouts raise (OSError, TimeoutError, EOFError)."""

    async def ask() -> Any:
        host, port = address.split(":")
        client = BrokerClient(0, lambda: (host, int(port)), "tiercel-tests", timeout_s)
        try:
            _, response = await client.request(api_key, versions, body)
        finally:
            client.close()
        return response

    return asyncio.run(ask())


def describe_quorum(node: BrokerProcess) -> Any:
    """DescribeQuorum v2 sent to a broker, which forwards it to the active controller
    (what kafka-metadata-quorum --bootstrap-server sends); the kio response."""
    return describe_quorum_at(node.bootstrap)


def describe_quorum_at(address: str, timeout_s: float = 10.0) -> Any:
    """DescribeQuorum v2 sent to ``address``: a broker listener forwards it, a
    controller listener's Raft client answers it if it leads (what
    kafka-metadata-quorum --bootstrap-controller sends); the kio response."""
    return request(
        address, DESCRIBE_QUORUM, DESCRIBE_QUORUM_VERSIONS, DESCRIBE_QUORUM_BODY, timeout_s
    )


def controller_ports(node_ids: list[int]) -> dict[int, int]:
    return {node_id: free_port() for node_id in node_ids}


def format_command(
    node: BrokerProcess, cluster_id: str = CLUSTER_ID, extra: Sequence[str] = ()
) -> list[str]:
    """`tiercel storage format` of the node's configuration (its file and overrides),
    with ``extra`` arguments (--standalone, --initial-controllers ...)."""
    args = [str(TIERCEL), "storage", "format", "-t", cluster_id, *extra]
    if node.config_file is not None:
        args.append(str(node.config_file))
    for key, value in node.overrides.items():
        args += ["--override", f"{key}={value}"]
    return args


def format_node(
    node: BrokerProcess, cluster_id: str = CLUSTER_ID, extra: Sequence[str] = ()
) -> str:
    """Run `tiercel storage format` on the node's configuration; its output."""
    result = subprocess.run(
        format_command(node, cluster_id, extra),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"format failed: {result.stderr}")
    return result.stdout


def kraft_node(
    root: Path,
    node_id: int,
    voters: Mapping[int, int],
    roles: str = "broker,controller",
    overrides: Mapping[str, object] | None = None,
    formatted: bool = True,
    own_metadata_dir: bool = True,
    config_file: Path | None = None,
    format_args: Sequence[str] | None = None,
    extra_listeners: Sequence[str] = (),
) -> BrokerProcess:
    """A node of the quorum ``voters`` (node id to controller port); a voter serves its
    controller listener on its port, a broker ``extra_listeners`` (NAME://host:port)
    beside its PLAINTEXT one. Without ``own_metadata_dir`` the metadata log lives
    in the (first) log dir, as metadata.log.dir's default has it. ``overrides`` come
    after the node's own keys, ``config_file`` (if any) under them all. With
    ``format_args`` (KIP-853: --initial-controllers, --standalone...) the quorum is
    dynamic: the voters go into controller.quorum.bootstrap.servers, and the format
    command gets those arguments."""
    quorum_key = "controller.quorum.voters"
    quorum = [f"{i}@127.0.0.1:{port}" for i, port in sorted(voters.items())]
    if format_args is not None:
        quorum_key = "controller.quorum.bootstrap.servers"
        quorum = [f"127.0.0.1:{port}" for _, port in sorted(voters.items())]
    listeners = []
    if "broker" in roles:
        listeners += ["PLAINTEXT://127.0.0.1:0", *extra_listeners]
    if "controller" in roles:
        listeners.append(f"CONTROLLER://127.0.0.1:{voters[node_id]}")
    data_dir = root / f"node-{node_id}"
    node = BrokerProcess(
        data_dir,
        {
            "node.id": node_id,
            "process.roles": roles,
            quorum_key: ",".join(quorum),
            "controller.listener.names": "CONTROLLER",
            "listeners": ",".join(listeners),
            **({"metadata.log.dir": str(data_dir / "metadata")} if own_metadata_dir else {}),
            **(overrides or {}),
        },
        config_file=config_file,
    )
    if formatted:
        format_node(node, extra=format_args or ())
    return node


def pause(node: BrokerProcess) -> None:
    """SIGSTOP: the process stops answering anyone, its sockets stay open."""
    assert node.proc is not None and node.proc.poll() is None
    os.kill(node.proc.pid, signal.SIGSTOP)


def resume(node: BrokerProcess) -> None:
    """SIGCONT of a paused node."""
    assert node.proc is not None
    os.kill(node.proc.pid, signal.SIGCONT)


def metadata_partition_dir(node: BrokerProcess) -> Path:
    """The node's ``__cluster_metadata-0`` directory."""
    metadata_dir = node.overrides.get("metadata.log.dir", node.log_dir)
    return Path(str(metadata_dir)) / "__cluster_metadata-0"


def quorum_state(node: BrokerProcess) -> dict[str, Any]:
    """The node's ``quorum-state`` file: leaderId, leaderEpoch, votedId..."""
    state: dict[str, Any] = json.loads((metadata_partition_dir(node) / "quorum-state").read_text())
    return state


def quorum_leader(controller_ports: Mapping[int, int], timeout_s: float = 60.0) -> Any:
    """The partition of the DescribeQuorum answer of the voter that leads now, asked
    of each voter of ``controller_ports`` in turn until one answers as the leader."""
    deadline = time.monotonic() + timeout_s
    while True:
        for node_id, port in controller_ports.items():
            try:
                response = describe_quorum_at(f"127.0.0.1:{port}", 2.0)
            except (OSError, TimeoutError):
                continue
            [partition] = response.topics[0].partitions
            answered = response.error_code == 0 and partition.error_code == 0
            if answered and partition.leader_id == node_id:
                return partition
        assert time.monotonic() < deadline, "no voter leads the quorum"
        time.sleep(0.2)
