"""A broker tiering to S3 (moto's server) for fault tests, and ways to look behind it
without reaching into the process: the bucket's listing (`remote_listing`, as
``tiercel remote-segments`` reads it), the records of ``__remote_log_metadata`` read
with a real client and decoded with Kafka's serde, the local segment files, and the
broker's log events.
"""

from __future__ import annotations

import datetime
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CTopicPartition

from support.broker import BrokerProcess
from support.moto_server import REGION
from tiercel.storage.topic_partition import TopicPartition
from tiercel.tiered.rlmm.remote_log_metadata_serde import RemoteLogMetadata, deserialize
from tiercel.tiered.rsm.remote_listing import RemoteSegmentListing, list_remote_segments
from tiercel.tiered.rsm.s3_config import S3Config
from tiercel.tiered.rsm.s3_remote_storage import S3ObjectStore

METADATA_TOPIC: Final = "__remote_log_metadata"
METADATA_PARTITIONS: Final = 50

# The environment boto3's standard chain resolves in the broker process: fake keys for
# moto, and nothing of the machine's AWS files or instance metadata.
AWS_ENV: Final = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_CONFIG_FILE": "/dev/null",
    "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    "AWS_EC2_METADATA_DISABLED": "true",
}


def s3_broker_overrides(endpoint_url: str, bucket: str, **extra: object) -> dict[str, object]:
    """A broker tiering to ``bucket`` at ``endpoint_url``, with short task intervals and
    S3 timeouts short enough that a stopped store fails a call within seconds."""
    return {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": "s3",
        "rsm.config.s3.bucket": bucket,
        "rsm.config.s3.region": REGION,
        "rsm.config.s3.endpoint.url": endpoint_url,
        "rsm.config.s3.connect.timeout.ms": 1000,
        "rsm.config.s3.read.timeout.ms": 2000,
        "rsm.config.s3.max.attempts": 1,
        "remote.log.manager.task.interval.ms": 200,
        "remote.log.manager.task.retry.backoff.ms": 200,
        "remote.log.manager.task.retry.backoff.max.ms": 1000,
        "log.retention.check.interval.ms": 200,
        **extra,
    }


def s3_broker(data_dir: Path, overrides: Mapping[str, object]) -> BrokerProcess:
    broker = BrokerProcess(data_dir, dict(overrides))
    broker.env.update(AWS_ENV)
    return broker


def bucket_segments(
    endpoint_url: str, bucket: str, topic: str, partition: int = 0
) -> list[RemoteSegmentListing]:
    """Every upload of ``topic``'s partition in the bucket, complete or not."""
    store = S3ObjectStore(S3Config(bucket, region=REGION, endpoint_url=endpoint_url))
    try:
        return list_remote_segments(store, TopicPartition(topic, partition))
    finally:
        store.close()


def complete_uploads(segments: list[RemoteSegmentListing]) -> dict[int, int]:
    """start offset -> end offset of each upload with its manifest; an offset uploaded
    completely twice fails."""
    found: dict[int, int] = {}
    for segment in segments:
        if segment.manifest is not None:
            assert segment.start_offset not in found, f"uploaded twice: {segment}"
            found[segment.start_offset] = segment.manifest.metadata.end_offset
    return found


def assert_contiguous(uploads: Mapping[int, int], first: int = 0) -> None:
    """Each upload begins where the previous ended, from ``first``: no gap, no overlap."""
    expected = first
    for start in sorted(uploads):
        assert start == expected, f"gap or overlap at {start} (expected {expected}): {uploads}"
        expected = uploads[start] + 1


def local_segment_bases(broker: BrokerProcess, topic: str, partition: int = 0) -> list[int]:
    directory = broker.log_dir / f"{topic}-{partition}"
    return sorted(int(p.name.split(".")[0]) for p in directory.glob("*.log"))


def local_segment_sizes(broker: BrokerProcess, topic: str, partition: int = 0) -> dict[int, int]:
    directory = broker.log_dir / f"{topic}-{partition}"
    return {int(p.name.split(".")[0]): p.stat().st_size for p in directory.glob("*.log")}


def metadata_records(bootstrap: str, timeout: float = 20.0) -> list[RemoteLogMetadata]:
    """Every record of ``__remote_log_metadata`` up to its high watermarks, decoded, in
    each partition's order (partitions one after the other)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "tiercel-metadata-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        ends = {
            p: consumer.get_watermark_offsets(CTopicPartition(METADATA_TOPIC, p), timeout=10)[1]
            for p in range(METADATA_PARTITIONS)
        }
        wanted = {p for p, end in ends.items() if end > 0}
        consumer.assign([CTopicPartition(METADATA_TOPIC, p, 0) for p in wanted])
        by_partition: dict[int, list[RemoteLogMetadata]] = {p: [] for p in wanted}
        positions = dict.fromkeys(wanted, 0)
        deadline = time.monotonic() + timeout
        while any(positions[p] < ends[p] for p in wanted):
            assert time.monotonic() < deadline, f"metadata read stuck at {positions} of {ends}"
            message = consumer.poll(0.2)
            if message is None or message.error() is not None:
                continue
            by_partition[message.partition()].append(deserialize(message.value()))
            positions[message.partition()] = message.offset() + 1
    finally:
        consumer.close()
    return [record for p in sorted(by_partition) for record in by_partition[p]]


@dataclass(frozen=True)
class LogEvent:
    time: datetime.datetime
    level: str
    event: str
    fields: dict[str, str]


_EVENT: Final = re.compile(r"^(\S+) (\w+) \S+ event=(\w+)(.*)$")
_FIELD: Final = re.compile(r"(\w[\w.]*)=(\S+)")


def log_events(broker: BrokerProcess, name: str) -> Iterator[LogEvent]:
    """The broker's log events called ``name``, oldest first, over all its runs."""
    for line in broker.log_text().splitlines():
        match = _EVENT.match(line)
        if match and match.group(3) == name:
            time = datetime.datetime.fromisoformat(match.group(1))
            yield LogEvent(time, match.group(2), name, dict(_FIELD.findall(match.group(4))))
