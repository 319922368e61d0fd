"""LogManager and producer state: producer.id.expiration.ms applied by the periodic check
and at load, and a restart that keeps every producer's state."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

from log_support import small_config

from tiercel.config.broker_config import BrokerConfig
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch
from tiercel.storage.log_manager import LogManager
from tiercel.storage.log_validator import validate_records
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.topic_partition import TopicPartition
from tiercel.storage.unified_log import UnifiedLog

CONFIG = small_config(segment_bytes=1 << 20)
TP = TopicPartition("idempotent", 0)


def manager(path: Path, scheduler: Scheduler, **settings: object) -> LogManager:
    config = BrokerConfig({"log.dirs": [str(path)], "node.id": 1, **settings})
    return LogManager(config, scheduler, lambda topic: CONFIG)


def send(log: UnifiedLog, producer_id: int, seq: int, timestamp: int) -> int:
    data = build_record_batch(
        [SimpleRecord(b"k", b"v", timestamp=timestamp)],
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=seq,
    )
    now = int(time.time() * 1000)
    return log.append_as_leader(validate_records(data, CONFIG, now), 0, now).first_offset


async def test_the_periodic_check_expires_idle_producers(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    lm = manager(
        tmp_path,
        scheduler,
        **{
            "producer.id.expiration.ms": 300,
            "producer.id.expiration.check.interval.ms": 50,
        },
    )
    await lm.startup(None)
    log = lm.get_or_create_log(TP, CONFIG, uuid.uuid4())
    now = int(time.time() * 1000)
    send(log, 1, 0, now)
    send(log, 2, 0, now + 60_000)  # a timestamp in the future keeps it young
    deadline = time.monotonic() + 5
    while 1 in log.producer_state.active_producers and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert set(log.producer_state.active_producers) == {2}
    assert send(log, 1, 42, now) == 2  # forgotten: any sequence is accepted again
    await lm.shutdown()


async def test_producers_survive_a_restart_unless_expired_meanwhile(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    lm = manager(tmp_path, scheduler, **{"producer.id.expiration.ms": 60_000})
    await lm.startup(None)
    log = lm.get_or_create_log(TP, CONFIG, uuid.uuid4())
    now = int(time.time() * 1000)
    send(log, 1, 0, now - 120_000)  # already idle for longer than the expiration
    send(log, 2, 0, now)
    send(log, 2, 1, now)
    await lm.shutdown()

    lm = manager(tmp_path, scheduler, **{"producer.id.expiration.ms": 60_000})
    await lm.startup(None)
    log = lm.logs[TP]
    assert set(log.producer_state.active_producers) == {2}
    assert send(log, 2, 1, now) == 2  # the retry of its last batch: a duplicate
    assert lm.remove_expired_producers() == 0
    await lm.shutdown()
