"""DeleteRecords in ReplicaManager (Kafka's deleteRecords and DelayedDeleteRecords): the
leader moves its log start offset at once, the answer waits until every live follower
has reported the same log start offset in its fetches (the low watermark), or the
request's timeout passes (REQUEST_TIMED_OUT)."""

from __future__ import annotations

import asyncio

from replication_support import TP, Broker, batch, values

from tiercel.server.delayed_delete_records import DeleteRecordsPartitionStatus
from tiercel.storage.topic_partition import TopicPartition


async def replicated(broker: Broker, replicas: tuple[int, ...] = (1, 2, 3)) -> None:
    """Broker 1 leads; 10 records, every follower has them (HW 10)."""
    await broker.apply(1, 0, replicas, replicas)
    await broker.rm.append_records(5000, 1, {TP: batch(values(10))})
    for follower in replicas[1:]:
        await broker.follower_fetch(follower, 10)
    assert broker.rm.partitions[TP].log.high_watermark == 10


def error_name(status: DeleteRecordsPartitionStatus) -> str | None:
    return None if status.error is None else status.error.error_code.name


async def test_the_answer_waits_for_every_follower_to_follow(broker: Broker) -> None:
    await replicated(broker)
    delete = asyncio.create_task(broker.rm.delete_records(5000, {TP: 4}))
    await asyncio.sleep(0.05)
    assert not delete.done()
    assert broker.rm.partitions[TP].log.log_start_offset == 4  # the leader moved at once
    await broker.follower_fetch(2, 10, start=4)
    await asyncio.sleep(0.05)
    assert not delete.done()  # follower 3 still starts at 0
    await broker.follower_fetch(3, 10, start=4)
    result = (await asyncio.wait_for(delete, 1))[TP]
    assert (error_name(result), result.low_watermark) == (None, 4)


async def test_a_follower_that_does_not_follow_times_the_request_out(broker: Broker) -> None:
    await replicated(broker)
    await broker.follower_fetch(2, 10, start=4)
    result = (await broker.rm.delete_records(200, {TP: 4}))[TP]
    # Kafka answers the low watermark as it was when the request arrived.
    assert (error_name(result), result.low_watermark) == ("request_timed_out", 0)


async def test_a_dead_broker_is_not_waited_for(broker: Broker) -> None:
    await replicated(broker, (1, 2, 4))  # broker 4 is not registered
    await broker.follower_fetch(2, 10, start=6)
    result = (await broker.rm.delete_records(5000, {TP: 6}))[TP]
    assert (error_name(result), result.low_watermark) == (None, 6)


async def test_leadership_lost_while_waiting(broker: Broker) -> None:
    await replicated(broker)
    delete = asyncio.create_task(broker.rm.delete_records(5000, {TP: -1}))  # -1: the HW
    await asyncio.sleep(0.05)
    await broker.apply(2, 1, (2, 3), (1, 2, 3))
    result = (await asyncio.wait_for(delete, 1))[TP]
    assert (error_name(result), result.low_watermark) == ("not_leader_or_follower", -1)


async def test_errors_are_answered_at_once(broker: Broker) -> None:
    await replicated(broker)
    offsets = {
        TopicPartition("__consumer_offsets", 0): 1,
        TopicPartition("unknown", 0): 1,
        TP: 11,  # beyond the high watermark
    }
    results = await asyncio.wait_for(broker.rm.delete_records(5000, offsets), 1)
    assert {tp: (error_name(s), s.low_watermark) for tp, s in results.items()} == {
        TopicPartition("__consumer_offsets", 0): ("invalid_topic_exception", -1),
        TopicPartition("unknown", 0): ("unknown_topic_or_partition", -1),
        TP: ("offset_out_of_range", -1),
    }
