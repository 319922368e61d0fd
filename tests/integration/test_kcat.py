"""kcat against the broker: metadata (-L), produce (-P), consume (-C -e), offsets (-Q).

kcat is librdkafka's command-line client, used the way people use it by hand; the
Python clients check what it wrote and kcat reads what they wrote. Without kcat the
module is skipped, or fails under CI (support.tools).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from support.broker import BrokerProcess
from support.clients import Outgoing, consume, create_topic, now_ms, produce, running_broker
from support.tools import required_tool


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    required_tool("kcat", "kafkacat")  # before the broker: skip or fail at once
    with running_broker(tmp_path_factory.mktemp("kcat")) as broker:
        yield broker


def kcat(broker: BrokerProcess, *args: str, stdin: bytes = b"") -> str:
    result = subprocess.run(
        [required_tool("kcat", "kafkacat"), "-b", broker.bootstrap, *args],
        input=stdin,
        capture_output=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    return result.stdout.decode()


def kcat_consume(broker: BrokerProcess, topic: str, partition: int, *args: str) -> list[Any]:
    """Every record of the partition, as kcat's JSON (``-J``), reading until the end."""
    out = kcat(
        broker, "-C", "-t", topic, "-p", str(partition), "-o", "beginning", "-e", "-J", *args
    )
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_metadata(shared: BrokerProcess) -> None:
    create_topic(shared.bootstrap, "kcat-metadata", 3)
    metadata = json.loads(kcat(shared, "-L", "-J"))
    assert metadata["brokers"] == [{"id": 1, "name": shared.bootstrap}]
    assert metadata["controllerid"] == 1
    (topic,) = [t for t in metadata["topics"] if t["topic"] == "kcat-metadata"]
    assert [
        (p["partition"], p["leader"], p["replicas"], p["isrs"]) for p in topic["partitions"]
    ] == [(p, 1, [{"id": 1}], [{"id": 1}]) for p in range(3)]


def test_produce_with_kcat_and_consume_everywhere(shared: BrokerProcess) -> None:
    topic = "kcat-produced"
    create_topic(shared.bootstrap, topic, 2)
    lines = [b"key-%d:value %d" % (i, i) for i in range(20)]
    kcat(
        shared,
        "-P",
        "-t",
        topic,
        "-p",
        "1",
        "-K",
        ":",
        "-H",
        "origin=kcat",
        stdin=b"\n".join(lines) + b"\n",
    )
    expected = [(i, b"key-%d" % i, b"value %d" % i) for i in range(20)]

    records = kcat_consume(shared, topic, 1)
    assert [(r["offset"], r["key"].encode(), r["payload"].encode()) for r in records] == expected
    assert all(r["headers"] == ["origin", "kcat"] and r["tstype"] == "create" for r in records)
    for client in ("confluent", "kafka-python", "aiokafka"):
        got = consume(client, shared.bootstrap, topic, 20, partitions=(1,))
        assert [(r.offset, r.key, r.value) for r in got.records] == expected, client
        assert all(r.headers == (("origin", b"kcat"),) for r in got.records)
    assert kcat_consume(shared, topic, 0) == []


@pytest.mark.parametrize("codec", ["gzip", "snappy", "zstd"])
def test_compressed_both_ways(shared: BrokerProcess, codec: str) -> None:
    topic = f"kcat-{codec}"
    create_topic(shared.bootstrap, topic, 2)
    values = [b"%s line %d " % (codec.encode(), i) * 20 for i in range(50)]
    kcat(shared, "-P", "-t", topic, "-p", "0", "-z", codec, stdin=b"\n".join(values) + b"\n")
    got = consume("aiokafka", shared.bootstrap, topic, 50)
    assert got.values() == values

    produce(
        "aiokafka",
        shared.bootstrap,
        topic,
        [Outgoing(1, v) for v in values],
        {"compression_type": codec},
    )
    records = kcat_consume(shared, topic, 1)
    assert [(r["offset"], r["payload"].encode()) for r in records] == list(enumerate(values))


def test_offsets_for_times(shared: BrokerProcess) -> None:
    topic = "kcat-times"
    create_topic(shared.bootstrap, topic, 1)
    base = now_ms() - 60_000
    produce(
        "confluent",
        shared.bootstrap,
        topic,
        [Outgoing(0, b"t%d" % i, None, (), base + 100 * i) for i in range(10)],
    )
    for target, expected in ((base - 1, 0), (base + 450, 5), (base + 900, 9), (base + 901, -1)):
        answer = kcat(shared, "-Q", "-t", f"{topic}:0:{target}")
        assert answer.split() == [topic, "[0]", "offset", str(expected)], answer
