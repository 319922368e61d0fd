"""A read_committed fetch from the start of a tier of hundreds of segments without
transactions, against a real broker: it fetches the indexes of the segment it reads and
no other (KIP-1058's txnIdxEmpty in each upload's metadata). Before, the search for
aborted transactions fetched the indexes of every later segment on every fetch, and on
an S3 tier fetches expired and piled up in the reader pool until they were refused."""

from __future__ import annotations

from pathlib import Path
from typing import Final

from support.broker import BrokerProcess
from support.clients import create_topic, earliest_local_offset, running_broker, wait_until
from support.txn_wire import consume_confluent, fetch_committed, plain
from support.wire import WireClient
from tiercel.tiered.remote_index_cache import DIR_NAME

TOPIC: Final = "large-tier"
SEGMENTS: Final = 300
OVERRIDES: Final = {
    "remote.log.storage.system.enable": "true",
    "remote.log.manager.task.interval.ms": 200,
    "log.retention.check.interval.ms": 200,
}


def cached_offset_indexes(broker: BrokerProcess) -> list[str]:
    return sorted(p.name for p in (broker.log_dir / DIR_NAME).glob("*.index"))


def test_a_read_committed_fetch_fetches_only_the_indexes_of_the_segment_read(
    tmp_path: Path,
) -> None:
    with running_broker(tmp_path, OVERRIDES) as broker:
        config = {
            "remote.storage.enable": "true",
            "segment.bytes": "1024",
            "local.retention.bytes": "1",
            "file.delete.delay.ms": "300",
        }
        create_topic(broker.bootstrap, TOPIC, config=config)
        # One batch of about 900 bytes per request: a segment each.
        values = [b"%06d:" % i + b"v" * 850 for i in range(SEGMENTS + 1)]
        with WireClient(broker.bootstrap) as client:
            for value in values:
                plain(client, TOPIC, value)
            assert wait_until(
                lambda: earliest_local_offset(broker.bootstrap, TOPIC) >= SEGMENTS - 1, 90, 0.3
            )
            assert cached_offset_indexes(broker) == []
            part = fetch_committed(client, TOPIC, 0)
            assert part.error_code == 0
            assert part.records
            assert list(part.aborted_transactions or ()) == []
        # The segment read; never the hundreds after it.
        assert len(cached_offset_indexes(broker)) == 1
        assert consume_confluent(broker.bootstrap, TOPIC, "read_committed", len(values)) == values
