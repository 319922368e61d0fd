"""The broker process as users run it: start, serve, stop cleanly, restart."""

from __future__ import annotations

import re
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from support.broker import TIERCEL, BrokerProcess
from support.wire import WireClient


def _produce(bootstrap: str, topic: str, count: int) -> list[int]:
    offsets: list[int] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(count):
        producer.produce(
            topic, value=b"v%d" % i, on_delivery=lambda err, msg: offsets.append(msg.offset())
        )
    assert producer.flush(15) == 0
    return offsets


def _consume_all(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "lifecycle", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    for _ in range(200):
        if len(values) >= expected:
            break
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            values.append(message.value())
    consumer.close()
    return values


def test_sigterm_is_a_clean_shutdown_and_restart_keeps_records(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("lifecycle", 1, 1)])["lifecycle"].result(15)
    assert _produce(broker.bootstrap, "lifecycle", 50) == list(range(50))

    assert broker.stop() == 0
    log = broker.log_text()
    assert "event=broker_stopped" in log
    assert (broker.log_dir / ".kafka_cleanshutdown").exists()
    assert (broker.log_dir / "recovery-point-offset-checkpoint").read_text().splitlines()[2] == (
        "lifecycle 0 50"
    )

    broker.start()
    assert "clean_shutdown=True" in broker.tail()
    assert _consume_all(broker.bootstrap, "lifecycle", 50) == [b"v%d" % i for i in range(50)]
    assert _produce(broker.bootstrap, "lifecycle", 5) == list(range(50, 55))


def test_sigint_is_a_clean_shutdown_too(broker: BrokerProcess) -> None:
    assert broker.proc is not None
    broker.proc.send_signal(signal.SIGINT)
    assert broker.proc.wait(30) == 0
    assert (broker.log_dir / ".kafka_cleanshutdown").exists()


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("log.retention.hour=1", "log.retention.hour"),
        ("log.retention.hour=1", "log.retention.hours"),
        ("num.partitions=many", "num.partitions"),
        ("listeners=PLAINTEXT://127.0.0.1:notaport", "listeners"),
        # Kafka settings Tiercel does not implement are refused, not silently ignored.
        ("log.preallocate=true", "log.preallocate=true is not supported by Tiercel"),
        ("socket.send.buffer.bytes=-2", "socket.send.buffer.bytes"),
    ],
)
def test_bad_config_stops_startup_naming_the_key(
    tmp_path: Path, override: str, expected: str
) -> None:
    result = subprocess.run(
        [str(TIERCEL), "broker", "--override", f"log.dirs={tmp_path}", "--override", override],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert expected in result.stderr


def test_config_file_and_overrides(tmp_path: Path) -> None:
    config = tmp_path / "broker.yaml"
    config.write_text(
        f"num.partitions: 3\nlisteners: PLAINTEXT://127.0.0.1:0\nlog.dirs: {tmp_path / 'data'}\n"
    )
    broker = BrokerProcess(tmp_path / "b", {"num.partitions": 2})
    broker.overrides.pop("listeners")
    broker.overrides.pop("log.dirs")
    broker.config_file = config
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("defaults")])["defaults"].result(15)
        # The override (2) beats the file (3).
        assert len(admin.list_topics("defaults", timeout=10).topics["defaults"].partitions) == 2
        assert (tmp_path / "data" / "meta.properties").exists()
    finally:
        broker.kill()


def _server_side_buffers(port: int) -> tuple[int, int]:
    """(SO_SNDBUF, SO_RCVBUF) of the broker's end of an established connection on
    `port`, from `ss -tm` (its skmem tb and rb fields)."""
    out = subprocess.run(
        ["ss", "-tmnH", "state", "established", f"( sport = :{port} )"],
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    ).stdout
    match = re.search(r"rb(\d+),t\d+,tb(\d+)", out)
    assert match is not None, out
    return int(match.group(2)), int(match.group(1))


def test_socket_buffer_sizes_apply_to_accepted_connections(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory(
        overrides={"socket.send.buffer.bytes": 40960, "socket.receive.buffer.bytes": 20480}
    )
    assert broker.port is not None
    with WireClient(broker.bootstrap) as client:
        # Answered, so the broker has accepted the connection and set its options.
        client.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
        # Linux keeps twice the size set (its bookkeeping overhead).
        assert _server_side_buffers(broker.port) == (2 * 40960, 2 * 20480)
