"""The broker process as users run it: start, serve, stop cleanly, restart."""

from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from support.broker import BrokerProcess


def _produce(bootstrap: str, topic: str, count: int) -> list[int]:
    offsets: list[int] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(count):
        producer.produce(topic, value=b"v%d" % i,
                         on_delivery=lambda err, msg: offsets.append(msg.offset()))
    assert producer.flush(15) == 0
    return offsets


def _consume_all(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lifecycle",
                         "enable.auto.commit": False})
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
