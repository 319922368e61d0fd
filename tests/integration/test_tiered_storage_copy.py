"""The leader's copy to the remote tier and local retention over it (KIP-405), with a
real broker process (``remote.log.storage.system.enable=true``, the local-directory
tier under its log dir) and a real client producing.

Rolled segments below the high watermark appear in the remote tier, each with its
objects and a manifest; with a tiny ``local.retention.bytes`` local retention then
removes local segments, but only ones already copied, and the log start offset (the
earliest offset) stays at 0 while the local start moves up.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import kafka
import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from support.broker import REPO, BrokerProcess
from support.clients import Outgoing, create_topic, produce, running_broker, wait_until, watermarks
from tiercel.tiered.rsm.object_layout import MANIFEST_SUFFIX, decode_manifest

BROKER_OVERRIDES: Final = {
    "remote.log.storage.system.enable": "true",
    "remote.log.manager.task.interval.ms": 200,
    "log.retention.check.interval.ms": 200,
}
TIERED: Final = {
    "remote.storage.enable": "true",
    "segment.bytes": "1024",
    "file.delete.delay.ms": "300",
}
COUNT: Final = 100


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("tiered"), BROKER_OVERRIDES) as broker:
        yield broker


def _fill(bootstrap: str, topic: str, first: int = 0) -> None:
    """COUNT records at offsets ``first`` on, two to a batch."""
    numbers = range(first, first + COUNT)
    records = [Outgoing(0, b"%05d:" % i + b"r" * 80, None, (), None) for i in numbers]
    delivered = produce(
        "confluent", bootstrap, topic, records, {"batch.num.messages": 2, "linger.ms": 5}
    )
    assert [d.offset for d in delivered] == list(numbers)


def _remote_segments(broker: BrokerProcess, topic: str) -> dict[int, int]:
    """start offset -> end offset of each complete upload of ``topic``'s partition 0."""
    root = broker.log_dir / "remote-storage"
    found = {}
    for path in root.glob(f"{topic}-*/0/*.{MANIFEST_SUFFIX}"):
        try:
            metadata = decode_manifest(path.read_bytes()).metadata
        except FileNotFoundError:
            continue  # deleted since the listing
        found[metadata.start_offset] = metadata.end_offset
    return found


def _local_bases(broker: BrokerProcess, topic: str) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in (broker.log_dir / f"{topic}-0").glob("*.log"))


def test_rolled_segments_are_copied_with_their_objects_and_a_manifest(
    broker: BrokerProcess,
) -> None:
    create_topic(broker.bootstrap, "copied", config=TIERED)
    _fill(broker.bootstrap, "copied")
    local = _local_bases(broker, "copied")
    assert len(local) > 3
    assert wait_until(lambda: len(_remote_segments(broker, "copied")) == len(local) - 1, 30)
    remote = _remote_segments(broker, "copied")
    # Every rolled segment, never the active one, each ending where the next begins.
    assert sorted(remote) == local[:-1]
    assert [remote[b] for b in local[:-1]] == [b - 1 for b in local[1:]]
    segment_dir = next((broker.log_dir / "remote-storage").glob("copied-*/0"))
    suffixes = {p.name.split(".", 1)[1] for p in segment_dir.iterdir()}
    assert {
        "log",
        "index",
        "timeindex",
        "snapshot",
        "leader-epoch-checkpoint",
        MANIFEST_SUFFIX,
    } <= (suffixes)
    assert "event=remote_segment_copied" in broker.log_text()


def test_local_retention_deletes_only_segments_already_in_the_remote_tier(
    broker: BrokerProcess,
) -> None:
    create_topic(broker.bootstrap, "trimmed", config={**TIERED, "local.retention.bytes": "1"})
    _fill(broker.bootstrap, "trimmed")
    before = _local_bases(broker, "trimmed")
    assert wait_until(lambda: _local_bases(broker, "trimmed") == before[-1:], 30)
    remote = _remote_segments(broker, "trimmed")
    # Each segment gone from local disk is in the remote tier.
    assert set(before[:-1]) <= set(remote)
    # The earliest offset is still 0: the records below the local start are remote.
    assert watermarks(broker.bootstrap, "trimmed") == (0, COUNT)


def test_copy_retries_while_the_tier_is_unavailable_and_catches_up(broker: BrokerProcess) -> None:
    """The tier's root replaced by a plain file: every upload fails. Produce goes on,
    the copy task logs its failures and the growing backlog, and local retention keeps
    every segment not yet copied; once the root is back the copy catches up and local
    retention trims."""
    root = broker.log_dir / "remote-storage"
    away = root.with_name("remote-storage.away")
    create_topic(broker.bootstrap, "outage", config={**TIERED, "local.retention.bytes": "1"})
    log_before = len(broker.log_text())
    root.rename(away)
    root.write_bytes(b"the object store is unreachable")
    try:
        _fill(broker.bootstrap, "outage")
        local = _local_bases(broker, "outage")
        assert wait_until(
            lambda: (
                "event=remote_copy_backlog partition=outage-0" in broker.log_text()[log_before:]
            ),
            30,
        )
        failures = broker.log_text()[log_before:].count(
            "event=remote_copy_failed partition=outage-0"
        )
        assert failures >= 1
        time.sleep(1)  # several retention checks: nothing may go
        assert _local_bases(broker, "outage") == local
        assert watermarks(broker.bootstrap, "outage") == (0, COUNT)
    finally:
        root.unlink()
        away.rename(root)
    assert wait_until(lambda: _local_bases(broker, "outage") == local[-1:], 30)
    assert set(local[:-1]) <= set(_remote_segments(broker, "outage"))
    assert watermarks(broker.bootstrap, "outage") == (0, COUNT)


def test_deleting_a_topic_deletes_its_remote_segments(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "doomed", config=TIERED)
    _fill(broker.bootstrap, "doomed")
    assert wait_until(lambda: len(_remote_segments(broker, "doomed")) >= 3, 30)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_topics(["doomed"], operation_timeout=10)["doomed"].result(15)
    root = broker.log_dir / "remote-storage"
    assert wait_until(lambda: not [p for p in root.glob("doomed-*/0/*") if p.is_file()], 30)
    # The other topics' remote segments are untouched.
    assert _remote_segments(broker, "copied")


def test_turning_tiering_off_with_delete_on_disable_deletes_the_remote_data(
    broker: BrokerProcess,
) -> None:
    """KIP-950: the remote segments go, and the earliest offset becomes the first local
    one."""
    create_topic(broker.bootstrap, "untiered", config={**TIERED, "local.retention.bytes": "1"})
    _fill(broker.bootstrap, "untiered")
    assert wait_until(lambda: len(_local_bases(broker, "untiered")) == 1, 30)
    assert watermarks(broker.bootstrap, "untiered") == (0, COUNT)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    off = ConfigResource(
        ConfigResource.Type.TOPIC,
        "untiered",
        incremental_configs=[
            ConfigEntry(
                name,
                "true" if name != "remote.storage.enable" else "false",
                incremental_operation=AlterConfigOpType.SET,
            )
            for name in (
                "remote.storage.enable",
                "remote.log.copy.disable",
                "remote.log.delete.on.disable",
            )
        ],
    )
    admin.incremental_alter_configs([off])[off].result(15)
    root = broker.log_dir / "remote-storage"
    assert wait_until(lambda: not [p for p in root.glob("untiered-*/0/*") if p.is_file()], 30)
    first_local = _local_bases(broker, "untiered")[0]
    assert first_local > 0
    assert wait_until(lambda: watermarks(broker.bootstrap, "untiered") == (first_local, COUNT), 10)


def _set(broker: BrokerProcess, topic: str, configs: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
            for name, value in configs.items()
        ],
    )
    admin.incremental_alter_configs([resource])[resource].result(15)


def _latest_tiered(broker: BrokerProcess, topic: str) -> int:
    """ListOffsets LATEST_TIERED (-5): the highest offset in the remote tier, or -1."""
    admin = kafka.KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        tp = kafka.TopicPartition(topic, 0)
        return int(admin.list_partition_offsets({tp: kafka.OffsetSpec.LATEST_TIERED})[tp].offset)
    finally:
        admin.close()


def _tiers_again_from(broker: BrokerProcess, topic: str, first: int) -> None:
    """COUNT records from ``first`` are produced, and every rolled segment reaches the
    tier and leaves the local disk (local.retention.bytes=1): LATEST_TIERED is the
    offset before the active segment."""
    _fill(broker.bootstrap, topic, first)

    def tiered() -> bool:
        local = _local_bases(broker, topic)
        highest = max(_remote_segments(broker, topic).values(), default=-1)
        return (
            len(local) == 1
            and highest == local[0] - 1 > first
            and _latest_tiered(broker, topic) == highest
        )

    assert wait_until(tiered, 30), (_remote_segments(broker, topic), _latest_tiered(broker, topic))


def test_tiering_turned_back_on_after_delete_on_disable_copies_again(tmp_path: Path) -> None:
    """KIP-950: turned off with remote.log.delete.on.disable, then on again, a topic tiers
    its new segments, also after a restart. Before, the disable wrote the partition
    delete markers (DELETE_PARTITION_FINISHED); replayed from __remote_log_metadata on
    re-enable it dropped the partition's new metadata cache, so nothing was copied any
    more and LATEST_TIERED kept answering the offset copied before the disable."""
    topic = "retiered"
    with running_broker(tmp_path / "broker", BROKER_OVERRIDES) as broker:
        create_topic(broker.bootstrap, topic, config={**TIERED, "local.retention.bytes": "1"})
        _tiers_again_from(broker, topic, 0)
        _set(
            broker,
            topic,
            {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"},
        )
        assert wait_until(lambda: not _remote_segments(broker, topic), 30)
        _set(broker, topic, {"remote.storage.enable": "true"})
        assert _latest_tiered(broker, topic) == -1  # the remote data is gone
        _tiers_again_from(broker, topic, COUNT)
        broker.restart()
        _tiers_again_from(broker, topic, 2 * COUNT)


def test_the_make_run_configuration_tiers_a_topic_that_asks(tmp_path: Path) -> None:
    # config/single-node.yaml as `make run` uses it, moved to a free port and a temporary
    # data directory: a topic with remote.storage.enable=true tiers with no other setting.
    broker = BrokerProcess(
        tmp_path,
        {"remote.log.manager.task.interval.ms": 200},
        config_file=REPO / "config" / "single-node.yaml",
    )
    broker.start()
    try:
        create_topic(broker.bootstrap, "out-of-the-box", config=TIERED)
        _fill(broker.bootstrap, "out-of-the-box")
        assert wait_until(lambda: len(_remote_segments(broker, "out-of-the-box")) > 2, 30)
    finally:
        broker.kill()
