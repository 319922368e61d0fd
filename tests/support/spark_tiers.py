"""Remote tiers for the Spark data source's tests, built without a broker
(support.tiering: real UnifiedLogs' rolled segments copied into a LocalTieredStorage),
and the rows Spark should read back from them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from support.in_memory_rlmm import InMemoryRemoteLogMetadataManager
from support.reader_rows import Headers, Row, header_pairs, produce_every_codec
from support.tiering import open_log, small_config, tier_rolled_segments
from tiercel.storage.scheduler import Scheduler
from tiercel.tiered.rsm.local_tiered_storage import LocalTieredStorage
from tiercel.tiered.rsm.remote_storage_manager import RemoteLogSegmentMetadata

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# topic, partition, offset, key, value, headers (None: none, or not read), timestamp
# (ms), timestampType
SparkRow = tuple[str, int, int, bytes | None, bytes | None, Headers, int, int]


@dataclass
class Tier:
    """A local remote tier: its ``file://`` root, the rows of each topic partition in
    offset order, the uploads of each."""

    root: str
    rsm: LocalTieredStorage
    rows: dict[tuple[str, int], list[Row]]
    segments: dict[tuple[str, int], list[RemoteLogSegmentMetadata]]

    def expected(
        self, wanted: Sequence[tuple[str, int]] | None = None, first: int = 0, last: int = 2**62
    ) -> list[SparkRow]:
        """The Spark rows of ``wanted`` (all by default), offsets ``first`` to ``last``."""
        keys = sorted(self.rows) if wanted is None else wanted
        return sorted(
            (topic, partition, *row)
            for topic, partition in keys
            for row in self.rows[(topic, partition)]
            if first <= row[0] <= last
        )


async def build_tier(
    directory: Path,
    scheduler: Scheduler,
    batches: dict[tuple[str, int], int],
    segment_bytes: int = 1024,
) -> Tier:
    """``batches[(topic, partition)]`` batches of every codec produced into a log each,
    rolled, and every segment tiered into one LocalTieredStorage."""
    rsm = LocalTieredStorage(str(directory / "remote"))
    rows = {}
    segments = {}
    for (topic, partition), count in sorted(batches.items()):
        config = small_config(segment_bytes=segment_bytes)
        log = open_log(str(directory / "logs" / f"{topic}-{partition}"), config, scheduler)
        rows[(topic, partition)] = produce_every_codec(log, count)
        log.roll()
        segments[(topic, partition)] = await tier_rolled_segments(
            log, rsm, InMemoryRemoteLogMetadataManager()
        )
        await log.close()
    return Tier(f"file://{rsm.root}", rsm, rows, segments)


def spark_rows(df: DataFrame) -> list[SparkRow]:
    """``df``'s rows (Kafka-source schema, headers or not), sorted, through Arrow so that
    timestamps keep their zone."""
    table: pa.Table = df.toArrow()
    return sorted(arrow_rows(table))


def arrow_rows(table: pa.Table) -> list[SparkRow]:
    has_headers = "headers" in table.column_names
    out: list[SparkRow] = []
    for r in table.to_pylist():
        out.append(
            (
                r["topic"],
                r["partition"],
                r["offset"],
                r["key"],
                r["value"],
                header_pairs(r["headers"]) if has_headers else None,
                round(r["timestamp"].timestamp() * 1000),
                r["timestampType"],
            )
        )
    return out


def without_headers(rows: list[SparkRow]) -> list[SparkRow]:
    return [(*row[:5], None, *row[6:]) for row in rows]  # type: ignore[misc]
