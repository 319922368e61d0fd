"""Replaying the metadata log into the metadata image, as a broker's metadata loader does
on start-up and a controller does after a failover (Kafka's MetadataLoader and
MetadataDelta; Kafka measures the same in its jmh TopicsImage*Benchmark classes).

    .venv/bin/python tests/bench/metadata_replay.py [--records 100000] [--rounds 5] [--no-gc]
        [--as-broker]

The log: metadata.version, three brokers registered and unfenced, then half the records
creating topics (a TopicRecord, a retention ConfigRecord, ten PartitionRecords of three
replicas with directories, at 4.0-IV3's versions) and half changing them (ISR shrinks
and expands, leader elections: PartitionChangeRecords). Per round, each phase timed
alone, in CPU seconds of the process (the machines these run on are shared, and wall
time there measures the neighbours too) for the whole log and microseconds a record:

- decode: the record values of __cluster_metadata (bytes) to records;
- replay: records into a MetadataDelta on the empty image, and ``apply``;
- local-changes: ``TopicsDelta.local_changes`` for broker 1 (what ReplicaManager gets);
- write: the image as a snapshot's records (ImageWriter);
- load: that snapshot's records replayed as a snapshot load onto the image.

Prints every round and the median of each. ``--no-gc`` turns Python's cyclic garbage
collector off, to show its share: every record replayed makes objects the image keeps,
and the collector's full passes scan every object the process holds. ``--as-broker``
first imports and freezes what ``tiercel broker`` loads before its event loop
(`load_before_the_loop`: its modules and every kio schema, out of the collector's
sight), so the replay runs as in a broker process. In-process; not part of `make test`.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
import uuid
from collections.abc import Callable

from tiercel.protocol.metadata.broker_records import (
    BrokerRegistrationChangeRecord,
    RegisterBrokerRecord,
)
from tiercel.protocol.metadata.cluster_records import FeatureLevelRecord
from tiercel.protocol.metadata.config_records import ConfigRecord
from tiercel.protocol.metadata.message_schema import MetadataRecord
from tiercel.protocol.metadata.metadata_record_serde import (
    ApiMessageAndVersion,
    deserialize,
    serialize,
)
from tiercel.protocol.metadata.metadata_version import FEATURE_NAME, LATEST_PRODUCTION
from tiercel.protocol.metadata.topic_records import (
    PartitionChangeRecord,
    PartitionRecord,
    TopicRecord,
)
from tiercel.server.cli import load_before_the_loop
from tiercel.server.metadata.image.image_writer import ImageWriterOptions, RecordListWriter
from tiercel.server.metadata.image.metadata_delta import MetadataDelta
from tiercel.server.metadata.image.metadata_image import MetadataImage
from tiercel.server.metadata.image.metadata_provenance import MetadataProvenance

_PARTITIONS = 10
_REPLICAS = (1, 2, 3)
_DIRECTORIES = tuple(uuid.UUID(int=(b << 64) | 1) for b in _REPLICAS)


def metadata_log(records: int) -> list[bytes]:
    """``records`` record values of a cluster's metadata log."""
    version = LATEST_PRODUCTION
    log = [ApiMessageAndVersion(FeatureLevelRecord(name=FEATURE_NAME, feature_level=version), 0)]
    for broker in _REPLICAS:
        log.append(
            ApiMessageAndVersion(
                RegisterBrokerRecord(broker_id=broker, broker_epoch=broker, log_dirs=_DIRECTORIES),
                version.register_broker_record_version(),
            )
        )
        log.append(
            ApiMessageAndVersion(
                BrokerRegistrationChangeRecord(broker_id=broker, broker_epoch=broker, fenced=-1), 2
            )
        )
    topic_ids: list[uuid.UUID] = []
    while len(log) < records // 2:
        topic_id = uuid.UUID(int=len(topic_ids) + 1)
        name = f"topic-{len(topic_ids)}"
        topic_ids.append(topic_id)
        log.append(ApiMessageAndVersion(TopicRecord(name=name, topic_id=topic_id), 0))
        config = ConfigRecord(resource_type=2, resource_name=name, name="retention.ms", value="1")
        log.append(ApiMessageAndVersion(config, 0))
        for partition_id in range(_PARTITIONS):
            leader = _REPLICAS[partition_id % 3]
            record = PartitionRecord(
                partition_id=partition_id,
                topic_id=topic_id,
                replicas=_REPLICAS,
                isr=_REPLICAS,
                leader=leader,
                leader_epoch=0,
                partition_epoch=0,
                directories=_DIRECTORIES,
            )
            log.append(ApiMessageAndVersion(record, version.partition_record_version()))
    change = 0
    while len(log) < records:
        topic_id = topic_ids[change % len(topic_ids)]
        partition_id = (change // len(topic_ids)) % _PARTITIONS
        kind = change % 3
        if kind == 0:
            record = PartitionChangeRecord(partition_id=partition_id, topic_id=topic_id, isr=(1, 2))
        elif kind == 1:
            record = PartitionChangeRecord(
                partition_id=partition_id, topic_id=topic_id, isr=_REPLICAS
            )
        else:
            record = PartitionChangeRecord(
                partition_id=partition_id, topic_id=topic_id, leader=_REPLICAS[change % 3]
            )
        log.append(ApiMessageAndVersion(record, version.partition_change_record_version()))
        change += 1
    return [serialize(record) for record in log]


def _timed(phase: Callable[[], object]) -> tuple[float, object]:
    start = time.process_time()
    result = phase()
    return time.process_time() - start, result


def one_round(values: list[bytes]) -> dict[str, float]:
    seconds: dict[str, float] = {}
    seconds["decode"], decoded = _timed(lambda: [deserialize(v).message for v in values])
    assert isinstance(decoded, list)
    records: list[MetadataRecord] = decoded
    delta = MetadataDelta(MetadataImage.EMPTY)
    provenance = MetadataProvenance(len(records) - 1, 1, 0, True)

    def replay() -> MetadataImage:
        for record in records:
            delta.replay(record)
        return delta.apply(provenance)

    seconds["replay"], image = _timed(replay)
    assert isinstance(image, MetadataImage) and delta.topics_delta is not None
    topics_delta = delta.topics_delta
    seconds["local-changes"], _ = _timed(lambda: topics_delta.local_changes(1))
    writer = RecordListWriter()
    seconds["write"], _ = _timed(lambda: image.write(writer, ImageWriterOptions()))
    snapshot = [record.message for record in writer.records]

    def load() -> MetadataImage:
        loading = MetadataDelta(image)
        for record in snapshot:
            loading.replay(record)
        loading.finish_snapshot()
        return loading.apply(provenance)

    seconds["load"], loaded = _timed(load)
    assert loaded == image, "the snapshot does not load back into the image"
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-gc", action="store_true", help="cyclic garbage collector off")
    parser.add_argument(
        "--as-broker", action="store_true", help="start-up's imports loaded and frozen first"
    )
    args = parser.parse_args()
    if args.no_gc:
        gc.disable()
    if args.as_broker:
        load_before_the_loop()
    values = metadata_log(args.records)
    rounds: dict[str, list[float]] = {}
    for round_number in range(1, args.rounds + 1):
        seconds = one_round(values)
        for phase, value in seconds.items():
            rounds.setdefault(phase, []).append(value)
        print(
            f"round {round_number}: "
            + ", ".join(f"{phase} {value:.3f} s" for phase, value in seconds.items()),
            flush=True,
        )
    for phase, values_s in rounds.items():
        median = statistics.median(values_s)
        print(
            f"median {phase:13} {median:.3f} s ({median / len(values) * 1e6:.2f} µs a record; "
            f"{min(values_s):.3f}-{max(values_s):.3f} s, {args.rounds} rounds, "
            f"{len(values)} records)"
        )


if __name__ == "__main__":
    main()
