"""ListOffsets resolved by Partition and ReplicaManager (Kafka's
Partition.fetchOffsetForTimestamp and ReplicaManager.fetchOffset): what a client and a
follower see, OFFSET_NOT_AVAILABLE while a new leader's HW lags its epoch start
(KIP-207), and the per-version rules for the special timestamps."""

from __future__ import annotations

import pytest
from replication_support import BASE_TS, TP, Broker, Cluster, MakeCluster, batch, values

from tiercel.protocol.errors import (
    NotLeaderOrFollowerError,
    OffsetNotAvailableError,
    UnknownLeaderEpochError,
)
from tiercel.protocol.list_offsets import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    IsolationLevel,
)
from tiercel.server.partition import OffsetResultHolder
from tiercel.storage.log_values import TimestampAndOffset
from tiercel.storage.topic_partition import TopicPartition

CLIENT = IsolationLevel.READ_UNCOMMITTED


async def lookup(
    c: Cluster, broker_id: int, timestamp: int, isolation: IsolationLevel | None = CLIENT
) -> OffsetResultHolder:
    return await c[broker_id].fetch_offset_for_timestamp(timestamp, isolation, None, True)


async def new_leader_behind_its_epoch_start(make_cluster: MakeCluster) -> Cluster:
    """Broker 2 has all 10 records of epoch 0 but learnt HW 0 (broker 3 never fetched):
    elected for epoch 1, its epoch starts at 10, above its HW."""
    c = make_cluster(ids=(1, 2, 3))
    c.elect(leader=1, leader_epoch=0)
    c.produce(1, values(10))
    await c.catch_up(c.fetcher(2), 2)
    assert (c[2].log.log_end_offset, c[2].log.high_watermark) == (10, 0)
    c.elect(leader=2, leader_epoch=1)
    return c


async def test_latest_is_not_available_while_the_hw_lags_the_epoch_start(
    make_cluster: MakeCluster,
) -> None:
    c = await new_leader_behind_its_epoch_start(make_cluster)
    for isolation in IsolationLevel:
        with pytest.raises(OffsetNotAvailableError):
            await lookup(c, 2, LATEST_TIMESTAMP, isolation)
    # A follower asks as a replica: it sees the log end, never this error.
    replica = await lookup(c, 2, LATEST_TIMESTAMP, None)
    assert replica.found == TimestampAndOffset(-1, 10, 1)
    earliest = await lookup(c, 2, EARLIEST_TIMESTAMP)
    assert earliest.found == TimestampAndOffset(-1, 0, 0)
    # A timestamp lookup carries the error for the replica manager to raise when its
    # answer lands past the HW (here every record is).
    by_time = await lookup(c, 2, BASE_TS)
    assert by_time.found is not None and by_time.found.offset == 0
    assert by_time.last_fetchable_offset == 0
    assert isinstance(by_time.offsets_error, OffsetNotAvailableError)
    # The followers reach the epoch start: the HW passes it and LATEST is answered.
    c[2].fetch_records_for_follower(1, 10, 0, 1 << 20, True, 1, -1, True)
    c[2].fetch_records_for_follower(3, 10, 0, 1 << 20, True, 1, -1, True)
    assert c[2].log.high_watermark == 10
    assert (await lookup(c, 2, LATEST_TIMESTAMP)).found == TimestampAndOffset(-1, 10, 1)
    assert (await lookup(c, 2, BASE_TS)).offsets_error is None


async def test_a_client_sees_up_to_the_hw_a_replica_to_the_log_end(
    make_cluster: MakeCluster,
) -> None:
    c = make_cluster(ids=(1, 2))
    c.elect(leader=1, leader_epoch=0)
    c.produce(1, values(4))
    assert (await lookup(c, 1, LATEST_TIMESTAMP)).found == TimestampAndOffset(-1, 0, 0)
    assert (await lookup(c, 1, LATEST_TIMESTAMP, None)).found == TimestampAndOffset(-1, 4, 0)
    # The new epoch started at 0, the HW is 0: nothing is lagging.
    assert (await lookup(c, 1, MAX_TIMESTAMP)).offsets_error is None
    assert (await lookup(c, 1, MAX_TIMESTAMP)).last_fetchable_offset == 0
    assert (await lookup(c, 1, MAX_TIMESTAMP, None)).last_fetchable_offset == 4
    local = await lookup(c, 1, EARLIEST_LOCAL_TIMESTAMP)
    assert local.found == TimestampAndOffset(-1, 0, 0)
    assert (await lookup(c, 1, LATEST_TIERED_TIMESTAMP)).found == TimestampAndOffset(-1, -1, -1)


async def test_fencing_and_leadership(make_cluster: MakeCluster) -> None:
    c = make_cluster(ids=(1, 2))
    c.elect(leader=1, leader_epoch=3)
    with pytest.raises(UnknownLeaderEpochError):
        await c[1].fetch_offset_for_timestamp(LATEST_TIMESTAMP, CLIENT, 4, True)
    with pytest.raises(NotLeaderOrFollowerError):
        await lookup(c, 2, LATEST_TIMESTAMP)
    # The debugging replica id may ask a follower.
    found = await c[2].fetch_offset_for_timestamp(EARLIEST_TIMESTAMP, CLIENT, None, False)
    assert found.found is not None and found.found.offset == 0


# -- ReplicaManager: per-partition results ---------------------------------------------


async def test_replica_manager_maps_offset_not_available_by_version(broker: Broker) -> None:
    await broker.apply(1, 0, (1, 2, 3), (1, 2, 3))
    await broker.rm.append_records(5000, 1, {TP: batch(values(10))})
    await broker.apply(1, 1, (1, 2, 3), (1, 2, 3))  # epoch 1 starts at 10, HW is 0
    rm = broker.rm
    for version, error in ((5, "offset_not_available"), (4, "leader_not_available")):
        for timestamp in (LATEST_TIMESTAMP, BASE_TS, 2**62):
            result = await rm.fetch_offset_for_timestamp(TP, timestamp, CLIENT, -1, True, version)
            assert result.error is not None and result.error.error_code.name == error
    earliest = await rm.fetch_offset_for_timestamp(TP, EARLIEST_TIMESTAMP, CLIENT, -1, True, 5)
    assert earliest.error is None and earliest.found is not None
    replica = await rm.fetch_offset_for_timestamp(TP, LATEST_TIMESTAMP, None, -1, True, 5)
    assert replica.found is not None and replica.found.offset == 10


async def test_replica_manager_timestamps_by_version(broker: Broker) -> None:
    await broker.apply(1, 0, (1,), (1,))
    await broker.rm.append_records(5000, 1, {TP: batch(values(3))})
    rm = broker.rm

    async def error(timestamp: int, version: int) -> str | None:
        result = await rm.fetch_offset_for_timestamp(TP, timestamp, CLIENT, -1, True, version)
        return None if result.error is None else result.error.error_code.name

    assert await error(MAX_TIMESTAMP, 6) == "unsupported_version"
    assert await error(MAX_TIMESTAMP, 7) is None
    assert await error(EARLIEST_LOCAL_TIMESTAMP, 7) == "unsupported_version"
    assert await error(EARLIEST_LOCAL_TIMESTAMP, 8) is None
    assert await error(LATEST_TIERED_TIMESTAMP, 8) == "unsupported_version"
    assert await error(LATEST_TIERED_TIMESTAMP, 9) is None
    assert await error(-6, 9) == "unsupported_version"
    # Past the largest timestamp, or at/after the HW for a client: nothing, no error.
    past = await rm.fetch_offset_for_timestamp(TP, 2**62, CLIENT, -1, True, 9)
    assert past.error is None and past.found is None
    unknown = TopicPartition(TP.topic, 7)
    result = await rm.fetch_offset_for_timestamp(unknown, LATEST_TIMESTAMP, CLIENT, -1, True, 9)
    assert result.error is not None
    assert result.error.error_code.name == "unknown_topic_or_partition"
