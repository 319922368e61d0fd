"""KRaft nodes of real processes for the KRaft tests: each node's directories formatted
with `tiercel storage format`, as a user formats them, then started with `tiercel
broker`. Controller listeners get free ports picked before the start, since every
voter's address goes into controller.quorum.voters; broker listeners bind port 0 and
keep their port across restarts (`BrokerProcess`)."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from support.broker import TIERCEL, BrokerProcess
from support.ports import free_port
from tiercel.server.replication.broker_client import BrokerClient

CLUSTER_ID: Final = "MkU3OEVBNTcwNTJENDM2Qg"


def describe_quorum(node: BrokerProcess) -> Any:
    """DescribeQuorum v2 sent to a broker, which forwards it to the active controller
    (what kafka-metadata-quorum --bootstrap-server sends); the kio response."""

    async def ask() -> Any:
        host, port = node.bootstrap.split(":")
        client = BrokerClient(0, lambda: (host, int(port)), "metadata-quorum", 10.0)
        partition = {"partition_index": 0}
        try:
            _, response = await client.request(
                55,
                (2, 2),
                {"topics": [{"topic_name": "__cluster_metadata", "partitions": [partition]}]},
            )
        finally:
            client.close()
        return response

    return asyncio.run(ask())


def controller_ports(node_ids: list[int]) -> dict[int, int]:
    return {node_id: free_port() for node_id in node_ids}


def format_command(node: BrokerProcess, cluster_id: str = CLUSTER_ID) -> list[str]:
    """`tiercel storage format` of the node's configuration (its file and overrides)."""
    args = [str(TIERCEL), "storage", "format", "-t", cluster_id]
    if node.config_file is not None:
        args.append(str(node.config_file))
    for key, value in node.overrides.items():
        args += ["--override", f"{key}={value}"]
    return args


def format_node(node: BrokerProcess, cluster_id: str = CLUSTER_ID) -> str:
    """Run `tiercel storage format` on the node's configuration; its output."""
    result = subprocess.run(
        format_command(node, cluster_id), capture_output=True, text=True, timeout=60, check=False
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
) -> BrokerProcess:
    """A node of the quorum ``voters`` (node id to controller port); a voter serves its
    controller listener on its port. Without ``own_metadata_dir`` the metadata log lives
    in the (first) log dir, as metadata.log.dir's default has it."""
    listeners = []
    if "broker" in roles:
        listeners.append("PLAINTEXT://127.0.0.1:0")
    if "controller" in roles:
        listeners.append(f"CONTROLLER://127.0.0.1:{voters[node_id]}")
    data_dir = root / f"node-{node_id}"
    node = BrokerProcess(
        data_dir,
        {
            "node.id": node_id,
            "process.roles": roles,
            "controller.quorum.voters": ",".join(
                f"{i}@127.0.0.1:{port}" for i, port in sorted(voters.items())
            ),
            "controller.listener.names": "CONTROLLER",
            "listeners": ",".join(listeners),
            **({"metadata.log.dir": str(data_dir / "metadata")} if own_metadata_dir else {}),
            **(overrides or {}),
        },
    )
    if formatted:
        format_node(node)
    return node
