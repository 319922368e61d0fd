"""Capture the golden request frames of tests/protocol/golden/ from real clients.

A one-off tool, not a test (run it again when a client is upgraded):

    cd tests && ../.venv/bin/python protocol/golden_capture.py

It starts a Tiercel broker whose advertised listener is a `support.capture.CaptureProxy`,
runs one admin + produce + consume session per client through the proxy, and writes the
request frames each client sent to ``golden/<client>/<api_name>_v<version>_<n>.bin``.
kafka-python needs python-snappy, lz4 and zstandard importable for its codecs (they are
not project dependencies: put them on PYTHONPATH for the capture run).

The session constants below are also what tests/protocol/test_golden_requests.py checks
the decoded frames against.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

GOLDEN_DIR: Final = Path(__file__).resolve().parent / "golden"
CLIENTS: Final = ("confluent", "kafka-python", "aiokafka")
CODECS: Final = ("none", "gzip", "snappy", "lz4", "zstd")
PARTITION: Final = 1  # of two, so that a partition id of 0 cannot pass by accident
TOPIC_CONFIG: Final = {"retention.ms": "3600000"}
PRODUCE_API_KEY: Final = 0
_LISTENING = re.compile(r"event=listening listener=PLAINTEXT host=\S+ port=(\d+)")


@dataclass(frozen=True, slots=True)
class GoldenRecord:
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]


def client_id(client: str) -> str:
    return f"golden-{client}"


def topic_name(client: str) -> str:
    return f"golden-{client}"


def records(client: str, codec: str) -> list[GoldenRecord]:
    """Three small records per codec: one with a header, one plain, one with a null key.

    The values repeat themselves so that every codec shrinks them: librdkafka sends a
    batch uncompressed when compressing would make it larger.
    """
    return [
        GoldenRecord(
            f"{client}-{codec}-0".encode(),
            f"first {codec} value; ".encode() * 6,
            (("trace", b"t-0"),),
        ),
        GoldenRecord(f"{client}-{codec}-1".encode(), f"second {codec} value; ".encode() * 6, ()),
        GoldenRecord(None, f"third {codec} value, no key; ".encode() * 6, ()),
    ]


def all_values(client: str) -> list[bytes]:
    return [r.value for codec in CODECS for r in records(client, codec)]


# -- sessions -----------------------------------------------------------------------------


def confluent_session(bootstrap: str) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    # confluent-kafka re-exports these without listing them in __all__.
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AdminClient,
        ConfigResource,
        NewTopic,
    )

    name, cid = topic_name("confluent"), client_id("confluent")
    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": cid})
    admin.create_topics([NewTopic(name, 2, 1, config=TOPIC_CONFIG)])[name].result(15)
    resource = ConfigResource("topic", name)
    admin.describe_configs([resource])[resource].result(15)
    for codec in CODECS:
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": cid,
                "compression.type": codec,
                "linger.ms": 100,
            }
        )
        for record in records("confluent", codec):
            producer.produce(
                name,
                key=record.key,
                value=record.value,
                headers=list(record.headers),
                partition=PARTITION,
            )
        assert producer.flush(15) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": cid,
            "group.id": "golden",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(name, PARTITION, OFFSET_BEGINNING)])
    expected = all_values("confluent")
    assert _poll_confluent(consumer, len(expected)) == expected
    # A seek with a leader epoch makes librdkafka validate the position (KIP-320):
    # OffsetForLeaderEpoch, then fetching resumes.
    consumer.seek(TopicPartition(name, PARTITION, 3, leader_epoch=0))
    assert _poll_confluent(consumer, len(expected) - 3) == expected[3:]
    consumer.close()
    admin.delete_topics([name])[name].result(15)


def _poll_confluent(consumer: Any, count: int) -> list[bytes]:
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < count and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            values.append(message.value())
    return values


def kafka_python_session(bootstrap: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic

    name, cid = topic_name("kafka-python"), client_id("kafka-python")
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id=cid)
    admin.create_topics(
        [NewTopic(name, num_partitions=2, replication_factor=1, topic_configs=TOPIC_CONFIG)]
    )
    admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
    for codec in CODECS:
        # Idempotence (kafka-python's default) needs InitProducerId, not served yet.
        producer = KafkaProducer(
            bootstrap_servers=bootstrap,
            client_id=cid,
            linger_ms=100,
            enable_idempotence=False,
            compression_type=None if codec == "none" else codec,
        )
        for record in records("kafka-python", codec):
            producer.send(
                name,
                key=record.key,
                value=record.value,
                headers=list(record.headers),
                partition=PARTITION,
            )
        producer.flush(15)
        producer.close()
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        client_id=cid,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    consumer.assign([TopicPartition(name, PARTITION)])
    consumer.seek_to_beginning()
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < len(all_values("kafka-python")) and time.monotonic() < deadline:
        for batch in consumer.poll(timeout_ms=200).values():
            values.extend(message.value for message in batch)
    consumer.close()
    assert values == all_values("kafka-python"), values
    admin.delete_topics([name])
    admin.close()


async def _aiokafka_session(bootstrap: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    name, cid = topic_name("aiokafka"), client_id("aiokafka")
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id=cid)
    await admin.start()
    await admin.create_topics(
        [NewTopic(name, num_partitions=2, replication_factor=1, topic_configs=TOPIC_CONFIG)]
    )
    await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
    for codec in CODECS:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            client_id=cid,
            linger_ms=100,
            enable_idempotence=False,
            compression_type=None if codec == "none" else codec,
        )
        await producer.start()
        sent = [
            await producer.send(
                name,
                key=record.key,
                value=record.value,
                headers=list(record.headers),
                partition=PARTITION,
            )
            for record in records("aiokafka", codec)
        ]
        await asyncio.gather(*sent)
        await producer.stop()
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        client_id=cid,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    partition = TopicPartition(name, PARTITION)
    consumer.assign([partition])
    await consumer.seek_to_beginning(partition)
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < len(all_values("aiokafka")) and time.monotonic() < deadline:
        for batch in (await consumer.getmany(timeout_ms=200)).values():
            values.extend(message.value for message in batch)
    await consumer.stop()
    assert values == all_values("aiokafka"), values
    await admin.delete_topics([name])
    await admin.close()


def aiokafka_session(bootstrap: str) -> None:
    asyncio.run(_aiokafka_session(bootstrap))


SESSIONS: Final = {
    "confluent": confluent_session,
    "kafka-python": kafka_python_session,
    "aiokafka": aiokafka_session,
}


def client_versions() -> dict[str, str]:
    import aiokafka
    import confluent_kafka
    import kafka

    return {
        "confluent": f"confluent-kafka {confluent_kafka.__version__} "
        f"(librdkafka {confluent_kafka.libversion()[0]})",
        "kafka-python": f"kafka-python {kafka.__version__}",
        "aiokafka": f"aiokafka {aiokafka.__version__}",
    }


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from support.broker import BrokerProcess
    from support.capture import CaptureProxy, save_frames, select_frames

    proxy = CaptureProxy()
    work = Path(tempfile.mkdtemp(prefix="golden-capture-"))
    broker = BrokerProcess(work, {"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"})
    try:
        broker.start()  # its bootstrap is the advertised listener: the proxy
        match = _LISTENING.search(broker.log_text())
        assert match, broker.tail()
        proxy.upstream = ("127.0.0.1", int(match.group(1)))
        proxy.start()
        for client in CLIENTS:
            proxy.clear()
            SESSIONS[client](broker.bootstrap)
            time.sleep(0.5)  # let the last frames through the proxy
            out_dir = GOLDEN_DIR / client
            shutil.rmtree(out_dir, ignore_errors=True)
            kept = select_frames(
                proxy.frames(), max_per_version=2, keep_all=frozenset({PRODUCE_API_KEY})
            )
            paths = save_frames(kept, out_dir)
            size = sum(p.stat().st_size for p in paths)
            print(f"{client}: {len(proxy.frames())} frames, kept {len(paths)} ({size} bytes)")
            for path in paths:
                print(f"  {path.name}")
        print(client_versions())
    except BaseException:
        print(broker.tail(60))
        raise
    finally:
        broker.kill()
        proxy.stop()
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
