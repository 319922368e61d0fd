"""ReplicaFetcher against a leader Partition in the same process: catching up, truncation
by leader epoch (KIP-101/279), divergence found at fetch time,
out-of-range positions, and errors that hold partitions back without spinning."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from pathlib import Path

import pytest
from replication_support import (
    TOPIC_ID,
    TP,
    Cluster,
    InProcessLeader,
    MakeCluster,
    append,
    epochs,
    log_bytes,
    values,
)

from tiercel.protocol.errors import ErrorCode
from tiercel.server.replication.fetch_state import EpochEndOffset, FetchPhase, InitialFetchState
from tiercel.storage.log_values import FetchIsolation
from tiercel.storage.topic_partition import TopicPartition


def offset_for_leader_epoch_requests(endpoint: InProcessLeader) -> list[object]:
    return [payload for api, payload in endpoint.requests if api == "offset_for_leader_epoch"]


def assert_identical(cluster: Cluster, a: int, b: int) -> None:
    assert log_bytes(cluster[a].log) == log_bytes(cluster[b].log)
    assert epochs(cluster[a].log) == epochs(cluster[b].log)


async def test_follower_catches_up_byte_for_byte_and_learns_the_hw_a_round_later(
    make_cluster: MakeCluster,
) -> None:
    c = make_cluster()
    c.elect(leader=1, leader_epoch=0)
    for i in range(5):
        c.produce(1, values(10, f"b{i}-"))
    # Follower 2 is in the ISR with nothing yet: the HW waits for it (Kafka's
    # Partition.maybeIncrementLeaderHW: the minimum log end offset of the ISR).
    assert (c[1].log.log_end_offset, c[1].log.high_watermark) == (50, 0)
    fetcher = c.fetcher(2)

    await fetcher.run_once()  # an empty log truncates to its HW, then fetches from 0
    assert (c[2].log.log_end_offset, c[2].log.high_watermark) == (50, 0)
    assert c[1].log.high_watermark == 0  # the leader learns the new LEO from the next fetch
    await fetcher.run_once()
    assert (c[1].log.high_watermark, c[2].log.high_watermark) == (50, 0)
    await fetcher.run_once()  # KIP-101: the follower's HW lags one round
    assert c[2].log.high_watermark == 50
    assert_identical(c, 1, 2)
    assert epochs(c[2].log) == [(0, 0)]
    state = fetcher.fetch_state(TP)
    assert state is not None
    assert (state.phase, state.fetch_offset, state.last_fetched_epoch) == (
        FetchPhase.FETCHING,
        50,
        0,
    )

    c.produce(1, values(7, "late"))
    highs = []
    for _ in range(3):
        await fetcher.run_once()
        highs.append((c[2].log.log_end_offset, c[1].log.high_watermark, c[2].log.high_watermark))
    assert highs == [(57, 50, 50), (57, 57, 50), (57, 57, 57)]
    assert_identical(c, 1, 2)


async def test_kip_279_follower_truncates_its_epoch_to_where_the_leader_ended_it(
    make_cluster: MakeCluster,
) -> None:
    c = make_cluster()
    # Broker 2 leads epochs 1 and 2; broker 1 replicates offsets [0, 50).
    c.elect(leader=2, leader_epoch=1)
    for i in range(3):
        c.produce(2, values(10, f"e1-{i}-"))
    c.elect(leader=2, leader_epoch=2)
    for i in range(2):
        c.produce(2, values(10, f"e2-{i}-"))
    await c.catch_up(c.fetcher(1), 1)
    # Broker 2 writes [50, 55) in epoch 2 and fails before broker 1 fetches them.
    c.produce(2, values(5, "lost"))
    # Broker 1 leads epochs 3 (from 50) and 4 (from 70).
    c.elect(leader=1, leader_epoch=3, isr=(1,), members=(1,))
    for i in range(2):
        c.produce(1, values(10, f"e3-{i}-"))
    c.elect(leader=1, leader_epoch=4, isr=(1,), members=(1,))
    c.produce(1, values(10, "e4-"))
    assert epochs(c[1].log) == [(1, 0), (2, 30), (3, 50), (4, 70)]
    # LeaderEpochFileCache.endOffsetFor: asking for epoch 2 gets (2, 50).
    assert c[1].last_offset_for_leader_epoch(4, 2) == (2, 50)

    c.elect(leader=1, leader_epoch=4, isr=(1,), members=(2,))
    endpoint = c.endpoint(2)
    fetcher = c.fetcher(2, endpoint)
    await fetcher.run_once()
    assert offset_for_leader_epoch_requests(endpoint) == [{TP: (4, 2)}]
    await c.catch_up(fetcher, 2)
    assert_identical(c, 1, 2)
    assert c[2].log.log_end_offset == 80


async def test_kip_279_follower_asks_again_for_epochs_the_leader_never_had(
    make_cluster: MakeCluster,
) -> None:
    c = make_cluster()
    leader, follower = c[1].log, c[2].log
    for log in (leader, follower):
        append(log, values(10, "common"), 0)
    append(follower, values(10, "f2-"), 2)
    append(follower, values(5, "f4-"), 4)
    append(leader, values(2, "l0-"), 0)
    append(leader, values(13, "l3-"), 3)
    append(leader, values(5, "l5-"), 5)
    assert epochs(follower) == [(0, 0), (2, 10), (4, 20)]
    assert epochs(leader) == [(0, 0), (3, 12), (5, 25)]

    c.elect(leader=1, leader_epoch=5)
    endpoint = c.endpoint(2)
    fetcher = c.fetcher(2, endpoint)
    await fetcher.run_once()
    # The leader knows no epoch 4: it answers epoch 3, which the follower never had, so
    # the follower cuts to the end of its epoch 2 and asks again.
    state = fetcher.fetch_state(TP)
    assert state is not None and state.phase is FetchPhase.TRUNCATING
    assert (follower.log_end_offset, epochs(follower)) == (20, [(0, 0), (2, 10)])
    await c.catch_up(fetcher, 2)
    assert offset_for_leader_epoch_requests(endpoint) == [{TP: (5, 4)}, {TP: (5, 2)}]
    assert_identical(c, 1, 2)
    assert epochs(follower) == [(0, 0), (3, 12), (5, 25)]


async def test_kip_101_restarts_truncate_by_epoch_and_keep_what_the_hw_would_lose(
    make_cluster: MakeCluster,
) -> None:
    c = make_cluster()  # A = 1, B = 2
    c.elect(leader=1, leader_epoch=0)
    c.produce(1, [b"m0"])
    fetcher = c.fetcher(2)
    await fetcher.run_once()
    c.produce(1, [b"m1"])
    await fetcher.run_once()
    await fetcher.run_once()
    # KIP-101's scenario 1: both have m0 and m1, A's HW is 2, B's still 1.
    assert (c[1].log.high_watermark, c[2].log.log_end_offset, c[2].log.high_watermark) == (2, 2, 1)

    # B restarts: truncating to its HW would drop m1; it asks A for the end of epoch 0.
    await c.restart(2)
    c.elect(leader=1, leader_epoch=0, members=(2,))
    endpoint = c.endpoint(2)
    await c.fetcher(2, endpoint).run_once()
    assert offset_for_leader_epoch_requests(endpoint) == [{TP: (0, 0)}]
    assert c[2].log.log_end_offset == 2

    # A fails, B leads epoch 1; A comes back as its follower and keeps m1 too.
    c.elect(leader=2, leader_epoch=1, isr=(2,), members=(2,))
    await c.restart(1)
    c.elect(leader=2, leader_epoch=1, isr=(2,), members=(1,))
    fetcher = c.fetcher(1)
    await fetcher.run_once()
    assert c[1].log.log_end_offset == 2
    c.produce(2, [b"m2"])
    await c.catch_up(fetcher, 1)
    assert_identical(c, 1, 2)
    assert epochs(c[1].log) == [(0, 0), (1, 2)]
    read = c[2].log.read(0, 1 << 20, FetchIsolation.LOG_END, True)
    assert all(m in bytes(read.records) for m in (b"m0", b"m1", b"m2"))


class NoEpochAnswers(InProcessLeader):
    """A leader whose OffsetForLeaderEpoch knows no end offset (as an old one would)."""

    async def fetch_epoch_end_offsets(
        self, partitions: Mapping[TopicPartition, tuple[int, int]]
    ) -> dict[TopicPartition, EpochEndOffset]:
        await super().fetch_epoch_end_offsets(partitions)
        return {tp: EpochEndOffset(ErrorCode.none) for tp in partitions}


async def test_divergence_found_at_fetch_time_truncates_and_continues(
    make_cluster: MakeCluster,
) -> None:
    c = make_cluster()
    c.elect(leader=1, leader_epoch=0)
    c.produce(1, values(10))
    await c.catch_up(c.fetcher(2), 2)
    c.elect(leader=2, leader_epoch=1, isr=(2,), members=(2,))
    c.produce(2, values(5, "divergent"))
    c.elect(leader=1, leader_epoch=2, isr=(1,), members=(1,))
    c.produce(1, values(3, "new"))

    c.elect(leader=1, leader_epoch=2, isr=(1,), members=(2,))
    endpoint = NoEpochAnswers(c, 1, 2)
    fetcher = c.fetcher(2, endpoint)
    await fetcher.run_once()
    # Truncation learnt nothing; the fetch from 15 with last fetched epoch 1 is answered
    # with the diverging epoch (0, 10), and the follower cuts there.
    fetch = [payload for api, payload in endpoint.requests if api == "fetch"]
    assert fetch[0][TP].fetch_offset == 15 and fetch[0][TP].last_fetched_epoch == 1  # type: ignore[index]
    assert c[2].log.log_end_offset == 10
    await c.catch_up(fetcher, 2)
    assert_identical(c, 1, 2)
    assert epochs(c[2].log) == [(0, 0), (2, 10)]


async def test_out_of_range_below_the_leaders_log_start_restarts_the_log(
    tmp_path: Path, make_cluster: MakeCluster
) -> None:
    for start in (20, 25):  # a batch boundary, and inside the batch [20, 30)
        c = make_cluster(root=tmp_path / str(start))
        c.elect(leader=1, leader_epoch=0, isr=(1,))
        for i in range(3):
            c.produce(1, values(10, f"b{i}-"))
        c[1].delete_records_on_leader(start)
        fetcher = c.fetcher(2)
        await c.catch_up(fetcher, 2)
        follower = c[2].log
        assert (follower.log_start_offset, follower.log_end_offset) == (start, 30)
        leader_tail = c[1].log.read(start, 1 << 20, FetchIsolation.LOG_END, True).records
        assert log_bytes(follower) == bytes(leader_tail)
        assert epochs(follower) == [(0, start)]


async def test_out_of_range_above_the_leaders_end_truncates_to_it(
    make_cluster: MakeCluster,
) -> None:
    # An unclean election: the new leader has less than the follower, and neither log
    # has epochs to compare (batches written before leader epochs existed).
    c = make_cluster()
    append(c[1].log, values(10), -1)
    append(c[2].log, values(10), -1)
    append(c[2].log, values(5, "unreplicated"), -1)
    c[2].log.update_high_watermark(15)
    c.elect(leader=1, leader_epoch=3, isr=(1,))
    endpoint = c.endpoint(2)
    fetcher = c.fetcher(2, endpoint)
    await fetcher.run_once()
    assert [api for api, _ in endpoint.requests] == ["fetch", "latest"]
    assert c[2].log.log_end_offset == 10
    await c.catch_up(fetcher, 2)
    assert log_bytes(c[1].log) == log_bytes(c[2].log)


async def test_a_failed_request_holds_the_partition_back_then_recovers(
    make_cluster: MakeCluster,
) -> None:
    c = make_cluster()
    c.elect(leader=1, leader_epoch=0)
    c.produce(1, values(10))
    endpoint = c.endpoint(2)
    fetcher = c.fetcher(2, endpoint, backoff_ms=100)
    endpoint.fail_next = ConnectionResetError("leader went away")
    assert await fetcher.run_once()
    sent = len(endpoint.requests)
    assert not await fetcher.run_once()  # held back: nothing is sent, nothing spins
    assert len(endpoint.requests) == sent
    await asyncio.sleep(0.12)
    await c.catch_up(fetcher, 2)
    assert_identical(c, 1, 2)


async def test_the_fetcher_task_keeps_following_through_errors(
    make_cluster: MakeCluster,
) -> None:
    c = make_cluster()
    c.elect(leader=1, leader_epoch=0)
    endpoint = c.endpoint(2)
    endpoint.idle_wait_s = 0.01
    fetcher = c.fetcher(2, endpoint, backoff_ms=200)
    fetcher.start()

    async def until(condition: object) -> None:
        async with asyncio.timeout(5):
            while not condition():  # type: ignore[operator]
                await asyncio.sleep(0.005)

    try:
        c.produce(1, values(10))
        await until(lambda: c[2].log.log_end_offset == 10)
        endpoint.fail_next = TimeoutError()
        sent = len(endpoint.requests)
        await until(lambda: len(endpoint.requests) > sent)
        await asyncio.sleep(0.1)
        assert len(endpoint.requests) == sent + 1  # backing off, not retrying at once
        c.produce(1, values(5, "more"))
        await until(lambda: c[2].log.high_watermark == 15)
        assert_identical(c, 1, 2)
    finally:
        task = fetcher.stop()
        assert task is not None
        await asyncio.gather(task, return_exceptions=True)
    assert endpoint.closed


async def test_a_fenced_follower_waits_for_its_new_leader_epoch(
    make_cluster: MakeCluster,
) -> None:
    c = make_cluster()
    c.elect(leader=1, leader_epoch=0)
    c.produce(1, values(10))
    fetcher = c.fetcher(2, backoff_ms=60_000)
    c.elect(leader=1, leader_epoch=1, members=(1,))  # broker 2 has not heard yet
    assert await fetcher.run_once()
    assert c[2].log.log_end_offset == 0
    assert not await fetcher.run_once()  # FENCED_LEADER_EPOCH: held back
    # The new state arrives and the replica manager re-adds the partition.
    c.elect(leader=1, leader_epoch=1, members=(2,))
    fetcher.add_partitions({TP: InitialFetchState(TOPIC_ID, 1, 1, c[2].initial_fetch_offset())})
    await c.catch_up(fetcher, 2)
    # The leader's epoch 1 has no records yet, so no batch has told the follower of it.
    assert log_bytes(c[1].log) == log_bytes(c[2].log)


async def test_an_answer_for_a_partition_removed_meanwhile_is_ignored(
    make_cluster: MakeCluster,
) -> None:
    c = make_cluster()
    c.elect(leader=1, leader_epoch=0)
    c.produce(1, values(10))
    fetcher = c.fetcher(2)
    await fetcher.run_once()
    c.produce(1, values(10, "next"))
    round_trip = asyncio.get_running_loop().create_task(fetcher.run_once())
    await asyncio.sleep(0)  # the fetch is on its way
    fetcher.remove_partitions([TP])
    await round_trip
    assert c[2].log.log_end_offset == 10
    assert fetcher.partition_count == 0


async def test_an_unexpected_error_in_an_append_marks_the_partition_failed(
    make_cluster: MakeCluster, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Kafka's AbstractFetcherThread.processFetchRequest: an error that is neither a
    corrupt batch nor a leader's answer, met while applying one partition's data after
    the batches were written, marks that partition failed (markPartitionFailed). Before,
    it escaped the round (and the rest of the response with it) and the partition was
    asked again from where it had been, below its log end, failing for ever."""
    c = make_cluster()
    c.elect(leader=1, leader_epoch=0)
    c.produce(1, values(10))
    endpoint = c.endpoint(2)
    fetcher = c.fetcher(2, endpoint)
    await fetcher.run_once()  # truncation, then the first fetch: caught up
    assert c[2].log.log_end_offset == 10
    c.produce(1, values(5, "more"))

    def bug(offset: int) -> None:
        raise RuntimeError("a bug after the write")

    monkeypatch.setattr(c[2].log.producer_state, "update_map_end_offset", bug)
    with caplog.at_level(logging.ERROR, "tiercel.replica_fetcher"):
        assert await fetcher.run_once()
    assert "event=replica_partition_failed" in caplog.text
    assert "RuntimeError('a bug after the write')" in caplog.text
    assert c[2].log.log_end_offset == 15  # what the failed append wrote stays
    assert fetcher.fetch_state(TP) is None and TP in fetcher.failed_partitions
    sent = len(endpoint.requests)
    assert not await fetcher.run_once()  # nothing left to fetch, nothing asked again
    assert len(endpoint.requests) == sent
    monkeypatch.undo()

    # A new leader epoch adds the partition again: it resumes at its log end.
    c.elect(leader=1, leader_epoch=1)
    fetcher.add_partitions({TP: InitialFetchState(TOPIC_ID, 1, 1, c[2].initial_fetch_offset())})
    c.produce(1, values(5, "after"))
    await c.catch_up(fetcher, 2)
    assert_identical(c, 1, 2)


async def test_a_fetch_position_that_is_not_the_log_end_marks_the_partition_failed(
    make_cluster: MakeCluster,
) -> None:
    """Kafka's ReplicaFetcherThread.processPartitionData refuses data fetched from
    anywhere but the log end (an IllegalStateException: the partition is marked failed);
    backing off and asking again from the same place never ends."""
    c = make_cluster()
    c.elect(leader=1, leader_epoch=0)
    c.produce(1, values(10))
    fetcher = c.fetcher(2)
    await c.catch_up(fetcher, 2)
    c.produce(1, values(5, "more"))
    # Something other than the fetcher moved the log end meanwhile.
    c[2].log.append_as_follower(c[1].log.read(10, 1 << 20, FetchIsolation.LOG_END, True).records)
    assert await fetcher.run_once()
    assert fetcher.fetch_state(TP) is None and TP in fetcher.failed_partitions
    assert_identical(c, 1, 2)
