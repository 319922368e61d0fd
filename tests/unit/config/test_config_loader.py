"""Loading YAML files and --override strings; the committed example files."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tiercel.config.broker_config import Listener
from tiercel.config.config_def import ConfigError
from tiercel.config.kafka_config import BROKER_CONFIGS
from tiercel.config.loader import load_broker_config, parse_override, render_example_yaml

CONFIG_DIR = Path(__file__).resolve().parents[3] / "config"


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "broker.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_no_file_gives_defaults() -> None:
    b = load_broker_config(None, [])
    assert b.explicit == frozenset() and b.node_id == 1


def test_flat_yaml_mapping_of_scalars_and_sequences(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "node.id: 4\n"
        "auto.create.topics.enable: false\n"
        "log.dirs:\n  - /d1\n  - /d2\n"
        "listeners: PLAINTEXT://:9093\n"
        "advertised.listeners: [PLAINTEXT://host-4:9093]\n"
        "log.cleaner.min.cleanable.ratio: 0.75\n"
        "log.cleanup.policy: compact,delete\n",
    )
    b = load_broker_config(path, [])
    assert b.node_id == 4
    assert b.auto_create_topics_enable is False
    assert b.log_dirs == ["/d1", "/d2"]
    assert b.listeners == (Listener("PLAINTEXT", "", 9093),)
    assert b.advertised_listeners == (Listener("PLAINTEXT", "host-4", 9093),)
    assert b.get("log.cleaner.min.cleanable.ratio") == 0.75
    assert b.get("log.cleanup.policy") == ("compact", "delete")


def test_empty_or_comment_only_file_is_an_empty_config(tmp_path: Path) -> None:
    assert load_broker_config(_write(tmp_path, "# nothing set\n"), []).explicit == frozenset()


def test_overrides_beat_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path, "num.partitions: 2\nlog.dir: /from-file\nbroker.id: 5\n")
    b = load_broker_config(
        path, ["num.partitions=8", "log.dirs=/x,/y", "node.id=6", "num.partitions = 9"]
    )
    assert b.num_partitions == 9  # the later override wins
    assert b.log_dirs == ["/x", "/y"]
    assert b.node_id == 6
    assert b.explicit == {"num.partitions", "log.dirs", "node.id"}


def test_override_value_may_contain_equals_signs() -> None:
    assert parse_override("cluster.id=a:1/x=y") == ("cluster.id", "a:1/x=y")
    assert parse_override("cluster.id=") == ("cluster.id", "")


@pytest.mark.parametrize("text", ["num.partitions", "=3", "  =x", ""])
def test_malformed_override(text: str) -> None:
    with pytest.raises(ConfigError, match="key=value"):
        load_broker_config(None, [text])


def test_override_with_unknown_key_or_bad_value() -> None:
    with pytest.raises(ConfigError, match=r"did you mean log\.retention\.hours"):
        load_broker_config(None, ["log.retention.hour=1"])
    with pytest.raises(ConfigError, match=r"'many' for configuration num\.partitions"):
        load_broker_config(None, ["num.partitions=many"])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("log:\n  retention:\n    hours: 24\n", "nested mapping"),
        ("- node.id\n- 1\n", "must be a mapping.*not a list"),
        ("just a string\n", "must be a mapping.*not a str"),
        ("1: one\n", "key 1 is not a property name"),
        ("node.id: [1\n", "not valid YAML"),
        ("num.partitions: 1\nnum.partitions: 2\n", "num.partitions is given twice"),
        ("log.retention.hour: 24\n", "did you mean log.retention.hours"),
    ],
)
def test_bad_files(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_broker_config(_write(tmp_path, text), [])


def test_unreadable_file(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match=f"Cannot read config file {re.escape(missing)}"):
        load_broker_config(missing, [])
    with pytest.raises(ConfigError, match="Cannot read config file"):
        load_broker_config(str(tmp_path), [])


def test_example_yaml_is_in_sync_with_the_definitions() -> None:
    committed = (CONFIG_DIR / "example.yaml").read_text(encoding="utf-8")
    assert committed == render_example_yaml(), (
        "config/example.yaml is stale: regenerate it with "
        "python -c 'from tiercel.config.loader import render_example_yaml as r; "
        'open("config/example.yaml", "w").write(r())\''
    )


def test_example_yaml_lists_every_key_at_a_default_that_loads_back(tmp_path: Path) -> None:
    text = render_example_yaml()
    settings = [line[2:] for line in text.splitlines() if re.match(r"# [a-z.]+: ", line)]
    assert [s.split(":")[0] for s in settings] == list(BROKER_CONFIGS)
    path = _write(tmp_path, "\n".join(settings) + "\n")
    b = load_broker_config(path, [])
    for name, defn in BROKER_CONFIGS.items():
        assert b.get(name) == defn.default, name


def test_single_node_yaml() -> None:
    b = load_broker_config(str(CONFIG_DIR / "single-node.yaml"), [])
    assert b.node_id == 1
    assert b.listeners == (Listener("PLAINTEXT", "127.0.0.1", 9092),)
    assert b.advertised_listeners == b.listeners
    assert b.log_dirs == ["./data"]
    assert not b.kraft_mode
    assert b.offsets_topic_replication_factor == 1
    # `make run` tiers out of the box to the local directory under ./data.
    assert b.get("remote.log.storage.system.enable") is True
    assert b.get("remote.log.storage.manager.class.name") == "local"
