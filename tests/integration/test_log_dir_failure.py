"""A failing disk under a real broker (Kafka's LogDirFailureChannel), with real EIO.

The broker runs with an LD_PRELOAD shim (`support.eio_shim`) that makes writes and
fsyncs under one log dir fail with EIO once a trigger file exists.

- One broker, one log dir: the next write fails, the broker halts (exit code 1) with
  Kafka's fatal line, and restarted without the fault it recovers from recovery points
  that never passed the failed write: every acknowledged record is there, nothing else.
- A 3-node KRaft cluster whose broker 2 has two log dirs: broker 2 tells the
  controller which dir holds each of its replicas (AssignReplicasToDirs, KIP-858: the
  controller leaves them UNASSIGNED on a broker with several dirs); failing dir ``a``
  takes its partitions offline on broker 2, whose heartbeat names the dir, and the
  controller moves their leadership to another ISR member (epoch bumped, broker 2 out
  of the ISR, its replica offline in Metadata) and acks=all produce works again; the
  partition in dir ``b`` is still led and served by broker 2.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from kio.schema.describe_log_dirs.v4.request import DescribeLogDirsRequest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import TopicName

from support.broker import BrokerProcess
from support.clients import (
    Outgoing,
    consume,
    create_topic,
    produce,
    wait_until,
    watermarks,
)
from support.cluster import ClusterProcess, read_offset_checkpoint
from support.eio_shim import build_eio_shim, eio_env
from support.wire import WireClient

HALT_LINE = "Shutdown broker because all log dirs in"


def _try_produce(bootstrap: str, topic: str, partition: int, value: bytes, timeout: float) -> None:
    """Send one record and give it ``timeout`` seconds; whether it is delivered does not
    matter (it is the record whose write fails)."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": int(timeout * 1000)}
    )
    producer.produce(topic, value, partition=partition)
    producer.flush(timeout + 5)


def _recovery_point(checkpoint: Path) -> int | None:
    return read_offset_checkpoint(checkpoint).get(("t", 0))


def test_a_failed_write_halts_a_broker_whose_only_log_dir_failed(
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    library = build_eio_shim(tmp_path)
    trigger = tmp_path / "fail-now"
    broker = broker_factory({"log.flush.offset.checkpoint.interval.ms": 200}, start=False)
    broker.env = eio_env(library, broker.log_dir, trigger)
    broker.start()
    create_topic(broker.bootstrap, "t", 1, {"flush.messages": "1"})
    sent = [Outgoing(0, b"acknowledged-%d" % i) for i in range(10)]
    assert [d.offset for d in produce("confluent", broker.bootstrap, "t", sent)] == list(range(10))
    checkpoint = broker.log_dir / "recovery-point-offset-checkpoint"
    assert wait_until(lambda: checkpoint.exists() and _recovery_point(checkpoint) == 10, 15)

    trigger.touch()
    _try_produce(broker.bootstrap, "t", 0, b"never-acknowledged", timeout=5)
    assert broker.proc is not None
    assert broker.proc.wait(30) == 1
    log = broker.tail(400)
    assert "event=log_dir_failed" in log and "event=broker_halted" in log, log
    assert HALT_LINE in log, log
    # The broker wrote nothing more there: the recovery point never passed the write
    # that failed, and no clean-shutdown marker says the dir needs no recovery.
    assert _recovery_point(checkpoint) == 10
    assert not (broker.log_dir / ".kafka_cleanshutdown").exists()

    trigger.unlink()
    broker.env = {}
    broker.start()
    assert "clean_shutdown=False" in broker.tail(400)
    assert watermarks(broker.bootstrap, "t") == (0, 10)
    records = consume("confluent", broker.bootstrap, "t", 10).records
    assert [(r.offset, r.value) for r in records] == [(i, sent[i].value) for i in range(10)]
    (again,) = produce("confluent", broker.bootstrap, "t", [Outgoing(0, b"after")])
    assert again.offset == 10


def test_a_failed_log_dir_moves_its_leaderships_and_the_other_dir_keeps_serving(
    cluster_factory: Callable[..., ClusterProcess], tmp_path: Path
) -> None:
    library = build_eio_shim(tmp_path)
    trigger = tmp_path / "fail-now"
    dirs = [tmp_path / "broker-2-a", tmp_path / "broker-2-b"]
    cluster = cluster_factory(
        broker_overrides={2: {"log.dirs": ",".join(map(str, dirs))}}, start=False
    )
    cluster.brokers[2].env = eio_env(library, dirs[0], trigger)
    cluster.start()
    # Broker 2 is the preferred leader of both partitions; it creates their logs in
    # partition order, each in the emptiest dir: t-0 in a, t-1 in b.
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    assignment = [[2, 1, 3], [2, 3, 1]]
    topic = NewTopic("t", 2, replica_assignment=assignment, config={"flush.messages": "1"})
    admin.create_topics([topic], operation_timeout=30)["t"].result(30)
    before = {}
    for partition in (0, 1):
        before[partition] = cluster.wait_for_leader("t", partition)
        assert before[partition].leader == 2
        cluster.wait_until_isr("t", partition, (1, 2, 3))
    assert wait_until(lambda: (dirs[0] / "t-0").is_dir() and (dirs[1] / "t-1").is_dir(), 15)
    first = [Outgoing(p, b"before-%d-%d" % (p, i)) for p in (0, 1) for i in range(5)]
    produce("confluent", cluster.bootstrap(), "t", first)

    trigger.touch()
    _try_produce(cluster.bootstrap(), "t", 0, b"write-fails", timeout=5)
    moved = cluster.wait_for_leader("t", 0, exclude=(2,), timeout=30)
    assert moved.leader_epoch > before[0].leader_epoch
    cluster.wait_until_isr("t", 0, (1, 3), timeout=30)
    assert cluster.brokers[2].running
    log = cluster.brokers[2].tail(400)
    assert "event=log_dir_failed" in log and "event=partitions_offline" in log, log

    _check_wire_views(cluster, dirs)

    # Dir b is untouched: broker 2 still leads t-1, in full ISR, and serves it.
    time.sleep(1)  # let any wrong reaction to the event show
    assert cluster.partition_state("t", 1) == before[1]
    after = [Outgoing(p, b"after-%d-%d" % (p, i)) for p in (0, 1) for i in range(5)]
    delivered = produce("confluent", cluster.bootstrap(), "t", after)
    assert all(d.offset >= 5 for d in delivered)
    for partition in (0, 1):
        values = consume("confluent", cluster.bootstrap(), "t", 10, partitions=(partition,))
        sent = [r.value for r in first + after if r.partition == partition]
        assert [v for v in values.values() if v != b"write-fails"] == sent
    assert cluster.brokers[2].running


def _check_wire_views(cluster: ClusterProcess, dirs: list[Path]) -> None:
    """Metadata (from any broker) lists broker 2's replica of t-0 as offline; broker 2's
    DescribeLogDirs lists dir a with KAFKA_STORAGE_ERROR and dir b as it is."""
    request = MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name=TopicName("t")),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )

    def offline_replicas() -> dict[int, list[int]]:
        with WireClient(cluster.brokers[1].bootstrap) as client:
            (topic,) = client.request(request).topics
        return {p.partition_index: list(p.offline_replicas) for p in topic.partitions}

    assert wait_until(lambda: offline_replicas() == {0: [2], 1: []}, 15), offline_replicas()
    with WireClient(cluster.brokers[2].bootstrap) as client:
        results = client.request(DescribeLogDirsRequest(topics=None)).results
    by_dir = {Path(r.log_dir): r for r in results}
    assert by_dir[dirs[0].resolve()].error_code == ErrorCode.kafka_storage_error
    assert by_dir[dirs[1].resolve()].error_code == ErrorCode.none
    assert [t.name for t in by_dir[dirs[1].resolve()].topics] == ["t"]
