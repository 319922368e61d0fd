"""A partition leader's half of transaction verification (KIP-890 part 1): Kafka's
ReplicaManager.handleProduceAppend and maybeStartTransactionVerificationForPartitions.

Before a transactional batch is appended to a partition where its producer has no
transaction open, the leader starts a verification in the log (a `VerificationGuard`,
`storage.verification_guard`) and asks the coordinator (`AddPartitionsToTxnManager`)
whether the partition is in the producer's ongoing transaction; only then is the batch
appended, presenting that guard. A partition whose producer already has its transaction
open here needs no question: its first write was verified. So verification costs one
round trip per partition per transaction, and nothing per record: only batch headers
are read here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Final

from tiercel.protocol.errors import (
    ErrorCode,
    InvalidProducerIdMappingError,
    InvalidTxnStateError,
    KafkaError,
    NotEnoughReplicasError,
    TransactionalIdAuthorizationFailedError,
    error_for_code,
)
from tiercel.protocol.record_batch import (
    RECORD_BATCH_OVERHEAD,
    RecordBatchHeader,
    read_header,
)
from tiercel.server.add_partitions_to_txn_manager import AddPartitionsToTxnManager
from tiercel.server.partition import Partition
from tiercel.server.replica_manager import ProduceResult, ReplicaManager
from tiercel.storage.topic_partition import TopicPartition
from tiercel.storage.verification_guard import SENTINEL, VerificationGuard

__all__ = [
    "TransactionalBatches",
    "handle_produce_append",
    "maybe_start_transaction_verification_for_partition",
    "produce_verification_error",
    "start_transaction_verification",
    "transactional_batches",
]

_MAGIC_V2: Final = 2

# Retriable coordinator answers that clients before KIP-890 would not retry on a
# produce: Kafka answers NOT_ENOUGH_REPLICAS instead, which every producer retries and
# which does not make it refresh its metadata.
_RETRIABLE_AS_NOT_ENOUGH_REPLICAS: Final = frozenset(
    {
        ErrorCode.concurrent_transactions,
        ErrorCode.network_exception,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.coordinator_not_available,
        ErrorCode.not_coordinator,
    }
)

GetPartition = Callable[[TopicPartition], Partition]
Verification = tuple[dict[TopicPartition, ErrorCode], dict[TopicPartition, VerificationGuard]]


@dataclass(frozen=True, slots=True)
class TransactionalBatches:
    """The one transactional producer of a produce request, and the base sequence of the
    first batch of each partition it writes transactionally."""

    producer_id: int
    producer_epoch: int
    base_sequences: dict[TopicPartition, int]


def _headers(records: bytes) -> Iterator[RecordBatchHeader]:
    """The headers of the v2 batches in ``records``, stopping at anything malformed
    (validation rejects it later)."""
    pos = 0
    while len(records) - pos >= RECORD_BATCH_OVERHEAD:
        header = read_header(records, pos)
        if header.magic != _MAGIC_V2 or header.batch_length <= 0:
            return
        yield header
        pos += header.size_in_bytes


def transactional_batches(
    entries: Mapping[TopicPartition, bytes | None],
) -> TransactionalBatches | None:
    """The transactional producer of a produce request, None if no batch is
    transactional; INVALID_PRODUCER_ID_MAPPING when batches of more than one producer
    (id and epoch) are, as Kafka's handleProduceAppend refuses them."""
    producers: set[tuple[int, int]] = set()
    base_sequences: dict[TopicPartition, int] = {}
    for tp, records in entries.items():
        first: RecordBatchHeader | None = None
        transactional = False
        for header in _headers(records or b""):
            if first is None:
                first = header
            if header.has_producer_id and header.is_transactional:
                transactional = True
                producers.add((header.producer_id, header.producer_epoch))
        if transactional and first is not None:
            base_sequences[tp] = first.base_sequence
    if len(producers) > 1:
        raise InvalidProducerIdMappingError(
            "Transactional records contained more than one producer ID"
        )
    if not producers:
        return None
    ((producer_id, producer_epoch),) = producers
    return TransactionalBatches(producer_id, producer_epoch, base_sequences)


async def start_transaction_verification(
    get_partition: GetPartition,
    manager: AddPartitionsToTxnManager,
    transactional_id: str,
    batches: TransactionalBatches,
) -> Verification:
    """(errors, guards): the partitions that must not be appended to and why (raw
    coordinator or local errors, Kafka's Errors), and the guard each verified partition's
    append must present. A partition whose transaction is already open here is in
    neither: it is appended to without a guard."""
    errors: dict[TopicPartition, ErrorCode] = {}
    guards: dict[TopicPartition, VerificationGuard] = {}
    for tp in batches.base_sequences:
        try:
            guard = get_partition(tp).maybe_start_transaction_verification(
                batches.producer_id, batches.base_sequences[tp], batches.producer_epoch
            )
        except KafkaError as e:
            errors[tp] = e.error_code
            continue
        if guard is not SENTINEL:
            guards[tp] = guard
    if guards:
        errors.update(
            await manager.verify_transaction(
                transactional_id, batches.producer_id, batches.producer_epoch, guards
            )
        )
    return errors, guards


def produce_verification_error(error: ErrorCode) -> KafkaError:
    """A failed verification as the produce response reports it (Kafka's
    handleProduceAppend): INVALID_TXN_STATE when the partition is not in the
    transaction; retriable coordinator troubles as NOT_ENOUGH_REPLICAS; the rest as is."""
    if error == ErrorCode.invalid_txn_state:
        return InvalidTxnStateError("Partition was not added to the transaction")
    if error in _RETRIABLE_AS_NOT_ENOUGH_REPLICAS:
        return NotEnoughReplicasError(
            "Unable to verify the partition has been added to the transaction. "
            f"Underlying error: {error.name.upper()}"
        )
    return error_for_code(error)


async def handle_produce_append(
    replica_manager: ReplicaManager,
    timeout_ms: int,
    required_acks: int,
    entries: dict[TopicPartition, bytes | None],
    transactional_id: str | None,
) -> dict[TopicPartition, ProduceResult]:
    """A client's produce: first have the coordinator verify the partitions where a
    transactional batch would open the producer's transaction, then append what may be
    (Kafka's ReplicaManager.handleProduceAppend)."""
    try:
        batches = transactional_batches(entries)
    except KafkaError as e:
        return {tp: ProduceResult(e) for tp in entries}
    if batches is not None and transactional_id is None:
        # Kafka's KafkaApis.handleProduceRequest: transactional records need the
        # transactional id they are authorized (and verified) for.
        refused = TransactionalIdAuthorizationFailedError(
            "transactional records without a transactional id"
        )
        return {tp: ProduceResult(refused) for tp in entries}
    manager = replica_manager.transaction_verifier
    if batches is None or transactional_id is None or manager is None:
        return await replica_manager.append_records(timeout_ms, required_acks, entries)
    errors, guards = await start_transaction_verification(
        replica_manager.get_partition_or_error, manager, transactional_id, batches
    )
    results = {tp: ProduceResult(produce_verification_error(e)) for tp, e in errors.items()}
    verified = {tp: records for tp, records in entries.items() if tp not in errors}
    if verified:
        results.update(
            await replica_manager.append_records(
                timeout_ms, required_acks, verified, verification_guards=guards
            )
        )
    return results


async def maybe_start_transaction_verification_for_partition(
    replica_manager: ReplicaManager,
    tp: TopicPartition,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
) -> tuple[ErrorCode, VerificationGuard]:
    """A coordinator's transactional write (TxnOffsetCommit to __consumer_offsets):
    (the coordinator's error, unmapped; the guard its append presents), NONE and
    SENTINEL when no verification is needed (Kafka's method of this name)."""
    manager = replica_manager.transaction_verifier
    if manager is None:
        return ErrorCode.none, SENTINEL
    batches = TransactionalBatches(producer_id, producer_epoch, {tp: base_sequence})
    errors, guards = await start_transaction_verification(
        replica_manager.get_partition_or_error, manager, transactional_id, batches
    )
    return errors.get(tp, ErrorCode.none), guards.get(tp, SENTINEL)
