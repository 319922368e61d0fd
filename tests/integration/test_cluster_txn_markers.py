"""Transaction markers replicate: in a three-broker cluster a partition leader appends
the COMMIT/ABORT markers of WriteTxnMarkers, followers replay them into their own
producer state and ``.txnindex``, and after the leader is SIGKILLed the new leader
answers read_committed exactly as the old one did (same aborted transactions, same
last stable offset, only committed records for librdkafka). A marker sent to a
follower is NOT_LEADER_OR_FOLLOWER.
"""

from __future__ import annotations

from collections.abc import Callable

from kio.schema.errors import ErrorCode

from support.clients import wait_until
from support.cluster import ClusterProcess
from support.txn_wire import (
    HAND_COORDINATOR_OVERRIDES,
    TxnProducer,
    consume_confluent,
    fetch_committed,
    latest_offset,
    plain,
    write_marker,
)
from support.wire import WireClient

TOPIC = "txn-replicated"


def test_markers_and_aborted_transactions_survive_a_leader_failover(
    cluster_factory: Callable[..., ClusterProcess],
) -> None:
    cluster = cluster_factory(overrides=HAND_COORDINATOR_OVERRIDES)
    cluster.create_topic(TOPIC, 1, replication_factor=3)
    leader = cluster.wait_for_leader(TOPIC, 0).leader
    follower = next(node for node in cluster.brokers if node != leader)
    with WireClient(cluster.bootstrap([leader])) as client:
        a = TxnProducer(client, TOPIC)
        b = TxnProducer(client, TOPIC)
        assert a.send(b"a0", b"a1") == (ErrorCode.none, 0)
        assert b.send(b"b0") == (ErrorCode.none, 2)
        assert a.end(commit=False) == ErrorCode.none  # 3
        assert plain(client, TOPIC, b"plain") == 4
        assert b.end(commit=True) == ErrorCode.none  # 5
        assert b.send(b"open") == (ErrorCode.none, 6)  # left open
        before = fetch_committed(client, TOPIC, 0)
        assert before.last_stable_offset == 6
        aborted = {(int(t.producer_id), int(t.first_offset)) for t in before.aborted_transactions}
        assert aborted == {(a.producer_id, 0)}
    with WireClient(cluster.bootstrap([follower])) as client:
        errors = write_marker(client, b.producer_id, b.epoch, True, 0, {TOPIC: [0]})
        assert errors == {(TOPIC, 0): ErrorCode.not_leader_or_follower}
    cluster.wait_until_isr(TOPIC, 0, list(cluster.brokers))
    cluster.kill(leader)
    new_leader = cluster.wait_for_leader(TOPIC, 0, exclude=[leader]).leader
    with WireClient(cluster.bootstrap([new_leader])) as client:
        # The metadata names the new leader before the broker has taken the leadership, and
        # its high watermark moves up once the other follower fetched from it.
        def serving() -> bool:
            part = fetch_committed(client, TOPIC, 0)
            return part.error_code == ErrorCode.none and part.high_watermark == 7

        assert wait_until(serving, 30)
        after = fetch_committed(client, TOPIC, 0)
        assert after.last_stable_offset == 6  # b's second transaction is still open
        assert {
            (int(t.producer_id), int(t.first_offset)) for t in after.aborted_transactions
        } == aborted
        assert latest_offset(client, TOPIC, 1) == 6
        # The coordinator ends the open transaction through the new leader.
        errors = write_marker(client, b.producer_id, b.epoch, False, 0, {TOPIC: [0]})
        assert errors == {(TOPIC, 0): ErrorCode.none}
        assert latest_offset(client, TOPIC, 1) == 8
    survivors = cluster.bootstrap([new_leader])
    assert consume_confluent(survivors, TOPIC, "read_committed", 2) == [b"b0", b"plain"]
