"""The leader's side of transaction verification without a broker (KIP-890 part 1):
which partitions of a produce need it (batch headers only; one transactional producer
per request), how a coordinator's AddPartitionsToTxn v4+ answer becomes the unverified
partitions (Kafka's AddPartitionsToTxnManager mapping), and how those errors reach a
produce response (Kafka's handleProduceAppend mapping) and a TxnOffsetCommit response
(Kafka 4's CoordinatorOperationExceptionHelper)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tiercel.protocol.errors import (
    ErrorCode,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidTxnStateError,
    NotEnoughReplicasError,
    error_for_code,
)
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch
from tiercel.server.add_partitions_to_txn_manager import unverified_partitions
from tiercel.server.coordinator.group.txn_offsets import txn_offset_commit_error
from tiercel.server.transaction_verification import (
    produce_verification_error,
    transactional_batches,
)
from tiercel.storage.topic_partition import TopicPartition

A0 = TopicPartition("a", 0)
A1 = TopicPartition("a", 1)
B0 = TopicPartition("b", 0)


def batch(pid: int = -1, epoch: int = -1, seq: int = -1, transactional: bool = False) -> bytes:
    return build_record_batch(
        [SimpleRecord(b"k", b"v", timestamp=0)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=transactional,
    )


def test_only_partitions_with_transactional_batches_need_verification() -> None:
    entries: dict[TopicPartition, bytes | None] = {
        A0: batch(5, 1, 10, transactional=True),
        A1: batch(5, 1, 3),  # idempotent, not transactional
        B0: batch(),
        TopicPartition("c", 0): None,
        TopicPartition("d", 0): b"\x00" * 10,  # truncated: validation refuses it later
    }
    found = transactional_batches(entries)
    assert found is not None
    assert (found.producer_id, found.producer_epoch) == (5, 1)
    assert found.base_sequences == {A0: 10}
    assert transactional_batches({A0: batch(), B0: batch(5, 1, 0)}) is None


def test_transactional_batches_of_two_producers_are_refused() -> None:
    for other in (batch(6, 1, 0, transactional=True), batch(5, 2, 0, transactional=True)):
        with pytest.raises(InvalidProducerIdMappingError, match="more than one producer ID"):
            transactional_batches({A0: batch(5, 1, 0, transactional=True), A1: other})


def response(
    error: ErrorCode = ErrorCode.none, **by_txn: dict[str, dict[int, ErrorCode]]
) -> object:
    return SimpleNamespace(
        error_code=error,
        results_by_transaction=[
            SimpleNamespace(
                transactional_id=tid,
                topic_results=[
                    SimpleNamespace(
                        name=topic,
                        results_by_partition=[
                            SimpleNamespace(partition_index=p, partition_error_code=e)
                            for p, e in parts.items()
                        ],
                    )
                    for topic, parts in topics.items()
                ],
            )
            for tid, topics in by_txn.items()
        ],
    )


def test_coordinator_answers_become_unverified_partitions_as_kafka_maps_them() -> None:
    answer = response(
        t1={"a": {0: ErrorCode.none, 1: ErrorCode.invalid_txn_state}},
        t2={"a": {0: ErrorCode.producer_fenced}, "b": {0: ErrorCode.transaction_abortable}},
        t3={"b": {0: ErrorCode.concurrent_transactions}},
        t4={"a": {0: ErrorCode.none}},
    )
    assert unverified_partitions(answer) == {
        "t1": {A1: ErrorCode.invalid_txn_state},
        "t2": {A0: ErrorCode.invalid_producer_epoch, B0: ErrorCode.invalid_txn_state},
        "t3": {B0: ErrorCode.concurrent_transactions},
        "t4": {},
    }
    # A request-level error is every partition's; the broker's authorization trouble is
    # not the client's business.
    assert unverified_partitions(response(ErrorCode.cluster_authorization_failed)) == (
        ErrorCode.invalid_txn_state
    )
    assert unverified_partitions(response(ErrorCode.not_coordinator)) == ErrorCode.not_coordinator


def test_verification_errors_reach_the_produce_response_as_kafka_reports_them() -> None:
    not_added = produce_verification_error(ErrorCode.invalid_txn_state)
    assert isinstance(not_added, InvalidTxnStateError)
    assert not_added.message == "Partition was not added to the transaction"
    for retriable in (
        ErrorCode.concurrent_transactions,
        ErrorCode.network_exception,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.coordinator_not_available,
        ErrorCode.not_coordinator,
    ):
        error = produce_verification_error(retriable)
        assert isinstance(error, NotEnoughReplicasError)
        assert retriable.name.upper() in error.message
    assert isinstance(
        produce_verification_error(ErrorCode.invalid_producer_epoch), InvalidProducerEpochError
    )
    unknown = produce_verification_error(ErrorCode.invalid_producer_id_mapping)
    assert unknown.error_code == ErrorCode.invalid_producer_id_mapping


def test_txn_offset_commit_reports_failures_as_kafka_4_does() -> None:
    """A coordinator out of reach while verifying is a load in progress (retried by
    every client, where librdkafka aborts the transaction on NETWORK_EXCEPTION); a slow
    or short ISR is COORDINATOR_NOT_AVAILABLE, a lost leadership NOT_COORDINATOR."""
    expected = {
        ErrorCode.network_exception: ErrorCode.coordinator_load_in_progress,
        ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,
        ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
        ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
        ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
        ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
        ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
        ErrorCode.record_list_too_large: ErrorCode.unknown_server_error,
        ErrorCode.invalid_txn_state: ErrorCode.invalid_txn_state,
        ErrorCode.invalid_producer_epoch: ErrorCode.invalid_producer_epoch,
        ErrorCode.concurrent_transactions: ErrorCode.concurrent_transactions,
    }
    assert {e: txn_offset_commit_error(e) for e in expected} == expected


def test_error_for_code_gives_the_named_class_or_one_carrying_the_code() -> None:
    assert type(error_for_code(ErrorCode.invalid_txn_state)) is InvalidTxnStateError
    network = error_for_code(ErrorCode.network_exception, "gone")
    assert (network.error_code, network.message) == (ErrorCode.network_exception, "gone")
    assert type(error_for_code(ErrorCode.network_exception)) is type(network)
