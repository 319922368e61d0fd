"""Spark reads the leader's lineage when the tier holds divergent uploads (KIP-405's
unclean-election scenarios): leader A tiered records of epoch 0 that were never
replicated; B, elected uncleanly with epoch 1, wrote other records at the same offsets
and tiered its log too, its segments rolled at other offsets. Every offset reads once,
as B (the broker's consumers) would serve it; none of A's lost records appear."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession

from support.in_memory_rlmm import InMemoryRemoteLogMetadataManager
from support.spark_tiers import spark_rows
from support.tiering import BASE_TS, open_log, produce, small_config, tier_rolled_segments
from tiercel.storage.scheduler import Scheduler
from tiercel.tiered.rsm.local_tiered_storage import LocalTieredStorage

SHARED = 30  # offsets both replicas hold
DIVERGED = 30  # offsets each wrote alone after


async def test_an_unclean_election_reads_the_new_leaders_records_only(
    spark: SparkSession, tmp_path: Path, scheduler: Scheduler
) -> None:
    rsm = LocalTieredStorage(str(tmp_path / "remote"))
    a = open_log(str(tmp_path / "a" / "t-0"), small_config(), scheduler)
    b = open_log(str(tmp_path / "b" / "t-0"), small_config(segment_bytes=700), scheduler)
    expected = []
    for first in range(0, SHARED, 3):
        values = [b"shared-%d" % i for i in range(first, first + 3)]
        for log in (a, b):
            produce(log, values, BASE_TS + first, 0)
        expected += [(i, values[i - first], BASE_TS + first) for i in range(first, first + 3)]
    for first in range(SHARED, SHARED + DIVERGED, 3):
        produce(a, [b"lost-%d" % i for i in range(first, first + 3)], BASE_TS + first, 0)
        values = [b"b-%d" % i for i in range(first, first + 3)]
        produce(b, values, BASE_TS + first, 1)
        expected += [(i, values[i - first], BASE_TS + first) for i in range(first, first + 3)]
    uploads = []
    for log in (a, b):
        log.roll()
        uploads += await tier_rolled_segments(log, rsm, InMemoryRemoteLogMetadataManager())
        await log.close()
    # The tier really holds both versions of the diverged offsets.
    assert any(m.end_offset >= SHARED and 1 not in m.segment_leader_epochs for m in uploads)
    assert any(1 in m.segment_leader_epochs for m in uploads)

    df = spark.read.format("tiercel").option("path", f"file://{rsm.root}")
    rows = spark_rows(df.option("subscribe", "t").option("minPartitions", "4").load())
    assert [(r[2], r[4], r[6]) for r in rows] == expected
