"""The transaction state machine: Kafka's legal transitions, epoch bumps and fencing."""

from __future__ import annotations

import pytest

from tiercel.protocol.errors import ProducerFencedError
from tiercel.server.coordinator.transaction.transaction_metadata import (
    VALID_PREVIOUS_STATES,
    TransactionMetadata,
    TransactionState,
    is_epoch_exhausted,
    new_transaction_metadata,
)
from tiercel.storage.topic_partition import TopicPartition

S = TransactionState
TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)


def initialized() -> TransactionMetadata:
    metadata = new_transaction_metadata("id", 42, 60000, 1000)
    metadata.complete_transition_to(metadata.prepare_increment_producer_epoch(60000, None, 1001))
    return metadata


def test_a_transaction_goes_through_its_states() -> None:
    m = initialized()
    assert (m.state, m.producer_id, m.producer_epoch) == (S.EMPTY, 42, 0)
    add = m.prepare_add_partitions({TP0}, 2000)
    assert m.pending_state == S.ONGOING and m.state == S.EMPTY  # nothing before the write
    m.complete_transition_to(add)
    assert (m.state, m.topic_partitions, m.txn_start_timestamp) == (S.ONGOING, {TP0}, 2000)
    m.complete_transition_to(m.prepare_add_partitions({TP1}, 2500))
    assert m.topic_partitions == {TP0, TP1} and m.txn_start_timestamp == 2000
    m.complete_transition_to(m.prepare_abort_or_commit(S.PREPARE_COMMIT, 3000))
    assert m.state == S.PREPARE_COMMIT and m.topic_partitions == {TP0, TP1}
    m.complete_transition_to(m.prepare_complete(3100))
    assert (m.state, m.topic_partitions) == (S.COMPLETE_COMMIT, set())
    # The next transaction starts its clock again.
    m.complete_transition_to(m.prepare_add_partitions({TP1}, 5000))
    assert m.txn_start_timestamp == 5000
    m.complete_transition_to(m.prepare_abort_or_commit(S.PREPARE_ABORT, 6000))
    m.complete_transition_to(m.prepare_complete(6001))
    assert m.state == S.COMPLETE_ABORT
    m.complete_transition_to(m.prepare_dead())
    assert m.state == S.DEAD


def test_illegal_transitions_and_double_pending_are_refused() -> None:
    m = initialized()
    with pytest.raises(RuntimeError, match="illegal transition Empty -> PrepareCommit"):
        m.prepare_abort_or_commit(S.PREPARE_COMMIT, 1)
    m.prepare_add_partitions({TP0}, 1)
    with pytest.raises(RuntimeError, match="pending"):
        m.prepare_add_partitions({TP1}, 2)
    m.abort_pending()
    assert m.pending_state is None and m.state == S.EMPTY
    with pytest.raises(RuntimeError, match="nothing"):
        m.complete_transition_to(m.prepare_no_transit())
    assert VALID_PREVIOUS_STATES[S.PREPARE_ABORT] == {S.ONGOING, S.PREPARE_EPOCH_FENCE}


def test_kip_360_epoch_bumps() -> None:
    m = initialized()
    m.complete_transition_to(m.prepare_increment_producer_epoch(60000, 0, 2))
    assert (m.producer_epoch, m.last_producer_epoch) == (1, 0)
    # A retry with the epoch before the bump it never heard about: the same answer.
    retry = m.prepare_increment_producer_epoch(60000, 0, 3)
    assert (retry.producer_epoch, retry.last_producer_epoch) == (1, 0)
    m.abort_pending()
    with pytest.raises(ProducerFencedError):
        m.prepare_increment_producer_epoch(60000, 5, 4)


def test_fencing_bumps_the_epoch_once() -> None:
    m = initialized()
    m.complete_transition_to(m.prepare_add_partitions({TP0}, 1))
    fence = m.prepare_fence_producer_epoch()
    assert (fence.txn_state, fence.producer_epoch) == (S.PREPARE_EPOCH_FENCE, 1)
    m.abort_pending()
    m.has_failed_epoch_fence = True  # the abort at that epoch failed to be written
    assert m.prepare_fence_producer_epoch().producer_epoch == 0


def test_rotation_to_a_new_producer_id_at_an_exhausted_epoch() -> None:
    m = initialized()
    m.producer_epoch = 32766
    assert m.is_producer_epoch_exhausted and is_epoch_exhausted(32767)
    with pytest.raises(RuntimeError, match="exhausted"):
        m.prepare_increment_producer_epoch(60000, None, 1)
    rotation = m.prepare_producer_id_rotation(43, 60000, 2, record_last_epoch=True)
    m.complete_transition_to(rotation)
    assert (m.producer_id, m.last_producer_id, m.producer_epoch, m.last_producer_epoch) == (
        43,
        42,
        0,
        32766,
    )


def test_state_names_are_kafkas() -> None:
    assert [s.kafka_name for s in S] == [
        "Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
        "CompleteAbort", "Dead", "PrepareEpochFence",
    ]  # fmt: skip
    assert S.from_kafka_name("Ongoing") == S.ONGOING and S.from_kafka_name("x") is None
