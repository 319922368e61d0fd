"""Transactions whose records are in the remote tier and whose markers are still local,
against a real broker and its transaction coordinator: two confluent-kafka
transactional producers write interleaved records over many 1 KiB segments, one aborts
and one commits. Once the markers are written the segments below them are tiered and
removed locally (``local.retention.bytes=1``), while the markers stay in the local
active segment. Read back with read_committed:

- a librdkafka consumer from offset 0 (the broker serves the tier, listing the aborted
  transaction from the local segment's `.txnindex`, as Kafka's
  collectAbortedTransactionInLocalSegments) sees exactly the committed records;
- Spark over the tier alone stops at the tier's last stable offset (the transactions
  were open when the last upload's producer snapshot was taken), so it reads none of
  them, and with ``kafka.bootstrap.servers`` it reads exactly the committed records."""

from __future__ import annotations

from pathlib import Path
from typing import Final

from confluent_kafka import Producer
from pyspark.sql import SparkSession

from support.clients import create_topic, earliest_local_offset, running_broker, wait_until
from support.txn_wire import consume_confluent

TOPIC: Final = "txn-spanning"
OVERRIDES: Final = {
    "remote.log.storage.system.enable": "true",
    "remote.log.manager.task.interval.ms": 200,
    "log.retention.check.interval.ms": 200,
    "transaction.state.log.replication.factor": 1,
    "transaction.state.log.min.isr": 1,
}
RECORDS: Final = 30  # per producer, about 300 bytes each: several segments


def transactional(bootstrap: str, transactional_id: str) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "linger.ms": 0,
            "batch.size": 512,
        }
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    return producer


def test_a_transaction_in_the_tier_with_its_marker_local_reads_committed_everywhere(
    tmp_path: Path, spark: SparkSession
) -> None:
    with running_broker(tmp_path, OVERRIDES) as broker:
        config = {
            "remote.storage.enable": "true",
            "segment.bytes": "1024",
            "local.retention.bytes": "1",
            "file.delete.delay.ms": "300",
        }
        create_topic(broker.bootstrap, TOPIC, config=config)
        aborting = transactional(broker.bootstrap, "spanning-abort")
        committing = transactional(broker.bootstrap, "spanning-commit")
        aborted = [b"aborted-%03d:" % i + b"a" * 280 for i in range(RECORDS)]
        committed = [b"committed-%03d:" % i + b"c" * 280 for i in range(RECORDS)]
        for a, c in zip(aborted, committed, strict=True):
            aborting.produce(TOPIC, a, partition=0)
            aborting.flush(10)
            committing.produce(TOPIC, c, partition=0)
            committing.flush(10)
        aborting.abort_transaction(30)
        committing.commit_transaction(30)
        # Everything below the active segment, which holds the markers, tiered and gone
        # locally: the markers' segment is the only local one.
        records_end = 2 * RECORDS
        assert wait_until(
            lambda: earliest_local_offset(broker.bootstrap, TOPIC) >= records_end - 4, 60, 0.3
        )
        local_start = earliest_local_offset(broker.bootstrap, TOPIC)
        assert local_start < records_end + 2  # a marker is still local
        assert local_start > RECORDS  # most records of both are in the tier alone

        assert consume_confluent(broker.bootstrap, TOPIC, "read_committed", RECORDS) == committed
        everything = consume_confluent(broker.bootstrap, TOPIC, "read_uncommitted", 2 * RECORDS)
        assert sorted(everything) == sorted(aborted + committed)

        root = f"file://{broker.log_dir / 'remote-storage'}"

        def spark_values(**options: str) -> list[bytes]:
            reader = spark.read.format("tiercel").option("path", root).option("subscribe", TOPIC)
            for name, value in options.items():
                reader = reader.option(name, value)
            rows = reader.load().select("offset", "value").collect()
            return [bytes(r.value) for r in sorted(rows, key=lambda r: int(r.offset))]

        committed_only = {"kafka.isolation.level": "read_committed"}
        assert spark_values(**committed_only) == []
        both = spark_values(**committed_only, **{"kafka.bootstrap.servers": broker.bootstrap})
        assert both == committed
