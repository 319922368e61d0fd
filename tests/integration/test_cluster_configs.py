"""config/kraft/node-{1,2,3}.yaml: the example cluster's three KRaft node configs.

Each file loads through config.loader exactly as `tiercel broker FILE` loads it, makes
its node a combined broker and controller of the same three-voter quorum, and sets the
durability settings the README promises (three replicas, two in sync for acks=all, no
unclean election) and Kafka's failure-detection defaults. The three differ only in
node.id, the listener ports and the directories, and still load with the overrides the
test cluster (tests/support/cluster.py) applies.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from support.cluster import CLUSTER_CONFIG_DIR, TEST_OVERRIDES, cluster_config
from tiercel.config.broker_config import BrokerConfig
from tiercel.config.loader import load_broker_config

NODES = (1, 2, 3)
PER_NODE_KEYS = {"node.id", "listeners", "log.dirs", "metadata.log.dir"}


def _load(node: int, overrides: list[str] | None = None) -> BrokerConfig:
    return load_broker_config(str(cluster_config(node)), overrides or [])


def test_the_directory_holds_exactly_the_three_nodes() -> None:
    assert sorted(p.name for p in CLUSTER_CONFIG_DIR.iterdir()) == [f"node-{n}.yaml" for n in NODES]


@pytest.mark.parametrize("node", NODES)
def test_each_file_loads_with_the_cluster_settings(node: int) -> None:
    config = _load(node)
    assert config.node_id == node
    assert config.process_roles == {"broker", "controller"}
    assert [str(listener) for listener in config.listeners] == [
        f"PLAINTEXT://127.0.0.1:909{node}",
        f"CONTROLLER://127.0.0.1:919{node}",
    ]
    assert config.controller_listener_names == ("CONTROLLER",)
    assert [(v.node_id, v.host, v.port) for v in config.quorum_voters] == [
        (n, "127.0.0.1", 9190 + n) for n in NODES
    ]
    assert config.log_dirs == [f"./data/node-{node}"]
    assert config.metadata_log_dir == f"./data/node-{node}-metadata"
    assert config.get("default.replication.factor") == 3
    assert config.get("min.insync.replicas") == 2
    assert config.get("offsets.topic.replication.factor") == 3
    assert config.get("unclean.leader.election.enable") is False
    assert config.get("controlled.shutdown.enable") is True
    assert config.broker_heartbeat_interval_ms == 2000
    assert config.broker_session_timeout_ms == 9000


def test_the_files_differ_only_in_identity_addresses_and_directories() -> None:
    documents = [yaml.safe_load(cluster_config(n).read_text()) for n in NODES]
    shared = [{k: v for k, v in d.items() if k not in PER_NODE_KEYS} for d in documents]
    assert shared[0] == shared[1] == shared[2]
    for key in PER_NODE_KEYS:
        assert len({str(d[key]) for d in documents}) == len(NODES), key


@pytest.mark.parametrize("node", NODES)
def test_the_test_cluster_overrides_apply(node: int, tmp_path: Path) -> None:
    overrides = {
        **TEST_OVERRIDES,
        "listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:40001",
        "controller.quorum.voters": f"{node}@127.0.0.1:40001",
        "log.dirs": str(tmp_path / "logs"),
        "metadata.log.dir": str(tmp_path / "metadata"),
    }
    config = _load(node, [f"{k}={v}" for k, v in overrides.items()])
    assert config.node_id == node
    assert config.listeners[0].port == 0
    assert [(v.node_id, v.port) for v in config.quorum_voters] == [(node, 40001)]
    assert config.log_dirs == [str(tmp_path / "logs")]
    assert config.metadata_log_dir == str(tmp_path / "metadata")
    assert config.get("replica.lag.time.max.ms") == TEST_OVERRIDES["replica.lag.time.max.ms"]
    # What the overrides leave alone still comes from the file.
    assert config.get("min.insync.replicas") == 2
