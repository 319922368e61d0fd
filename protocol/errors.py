"""Kafka errors as exceptions, each carrying its wire error code.

Errors travel through the broker as these exceptions; `ReplicaManager` turns them into
per-partition results and only handlers build responses. Names mirror Kafka's Java
exception classes so that readers of Kafka's source can map one to the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode", "KafkaError", "RecordError", "error_for_code"]


@dataclass(frozen=True, slots=True)
class RecordError:
    """One record of a produced batch that failed validation (KIP-467; Kafka's
    ProduceResponse.RecordError): its index in the batch and why."""

    batch_index: int
    message: str | None = None

    def __str__(self) -> str:
        # Kafka's RecordError.toString, which its error messages embed.
        message = "null" if self.message is None else f"'{self.message}'"
        return f"RecordError(batchIndex={self.batch_index}, message={message})"


class KafkaError(Exception):
    """Base class: a failure that has a Kafka error code.

    ``record_errors`` names the records that caused it when validation failed record by
    record (Kafka's RecordValidationException); Produce v8+ returns them."""

    error_code: ClassVar[ErrorCode] = ErrorCode.unknown_server_error

    def __init__(self, message: str = "", *, record_errors: Sequence[RecordError] = ()) -> None:
        super().__init__(message or self.error_code.name)
        self.record_errors = tuple(record_errors)

    @property
    def message(self) -> str:
        return str(self)


class UnknownServerError(KafkaError):
    error_code = ErrorCode.unknown_server_error


class OffsetOutOfRangeError(KafkaError):
    error_code = ErrorCode.offset_out_of_range


class CorruptRecordError(KafkaError):
    error_code = ErrorCode.corrupt_message


class UnknownTopicOrPartitionError(KafkaError):
    error_code = ErrorCode.unknown_topic_or_partition


class NotLeaderOrFollowerError(KafkaError):
    error_code = ErrorCode.not_leader_or_follower


class LeaderNotAvailableError(KafkaError):
    error_code = ErrorCode.leader_not_available


class ReplicaNotAvailableError(KafkaError):
    error_code = ErrorCode.replica_not_available


class OffsetNotAvailableError(KafkaError):
    """A new leader's high watermark has not reached its epoch's start yet (KIP-207)."""

    error_code = ErrorCode.offset_not_available


class RequestTimedOutError(KafkaError):
    error_code = ErrorCode.request_timed_out


class RecordTooLargeError(KafkaError):
    error_code = ErrorCode.message_too_large


class InvalidTopicError(KafkaError):
    error_code = ErrorCode.invalid_topic_exception


class RecordBatchTooLargeError(KafkaError):
    error_code = ErrorCode.record_list_too_large


class NotEnoughReplicasError(KafkaError):
    error_code = ErrorCode.not_enough_replicas


class NotEnoughReplicasAfterAppendError(KafkaError):
    error_code = ErrorCode.not_enough_replicas_after_append


class InvalidRequiredAcksError(KafkaError):
    error_code = ErrorCode.invalid_required_acks


class InvalidTimestampError(KafkaError):
    error_code = ErrorCode.invalid_timestamp


class UnsupportedVersionError(KafkaError):
    error_code = ErrorCode.unsupported_version


class TopicExistsError(KafkaError):
    error_code = ErrorCode.topic_already_exists


class InvalidPartitionsError(KafkaError):
    error_code = ErrorCode.invalid_partitions


class InvalidReplicationFactorError(KafkaError):
    error_code = ErrorCode.invalid_replication_factor


class InvalidReplicaAssignmentError(KafkaError):
    error_code = ErrorCode.invalid_replica_assignment


class InvalidConfigError(KafkaError):
    error_code = ErrorCode.invalid_config


class NotControllerError(KafkaError):
    error_code = ErrorCode.not_controller


class InvalidRequestError(KafkaError):
    error_code = ErrorCode.invalid_request


class PolicyViolationError(KafkaError):
    error_code = ErrorCode.policy_violation


class KafkaStorageError(KafkaError):
    error_code = ErrorCode.kafka_storage_error


class FencedLeaderEpochError(KafkaError):
    error_code = ErrorCode.fenced_leader_epoch


class UnknownLeaderEpochError(KafkaError):
    error_code = ErrorCode.unknown_leader_epoch


class UnsupportedCompressionTypeError(KafkaError):
    error_code = ErrorCode.unsupported_compression_type


class InvalidRecordError(KafkaError):
    error_code = ErrorCode.invalid_record


class UnknownTopicIdError(KafkaError):
    error_code = ErrorCode.unknown_topic_id


class TopicDeletionDisabledError(KafkaError):
    error_code = ErrorCode.topic_deletion_disabled


class CoordinatorLoadInProgressError(KafkaError):
    error_code = ErrorCode.coordinator_load_in_progress


class OutOfOrderSequenceNumberError(KafkaError):
    error_code = ErrorCode.out_of_order_sequence_number


class InvalidProducerEpochError(KafkaError):
    error_code = ErrorCode.invalid_producer_epoch


class InvalidTxnStateError(KafkaError):
    error_code = ErrorCode.invalid_txn_state


class TransactionCoordinatorFencedError(KafkaError):
    """A transaction marker from a coordinator older than one already seen (Kafka's
    TransactionCoordinatorFencedException)."""

    error_code = ErrorCode.transaction_coordinator_fenced


class TransactionalIdAuthorizationFailedError(KafkaError):
    error_code = ErrorCode.transactional_id_authorization_failed


class TopicAuthorizationFailedError(KafkaError):
    """Kafka's TopicAuthorizationException."""

    error_code = ErrorCode.topic_authorization_failed


class GroupAuthorizationFailedError(KafkaError):
    """Kafka's GroupAuthorizationException."""

    error_code = ErrorCode.group_authorization_failed


class ClusterAuthorizationFailedError(KafkaError):
    """Kafka's ClusterAuthorizationException: the principal lacks an operation on the
    cluster resource."""

    error_code = ErrorCode.cluster_authorization_failed


class SecurityDisabledError(KafkaError):
    """Kafka's SecurityDisabledException: an ACL request to a node without an
    authorizer."""

    error_code = ErrorCode.security_disabled


class CoordinatorNotAvailableError(KafkaError):
    error_code = ErrorCode.coordinator_not_available


class NotCoordinatorError(KafkaError):
    error_code = ErrorCode.not_coordinator


class IllegalGenerationError(KafkaError):
    error_code = ErrorCode.illegal_generation


class InconsistentGroupProtocolError(KafkaError):
    error_code = ErrorCode.inconsistent_group_protocol


class InvalidGroupIdError(KafkaError):
    error_code = ErrorCode.invalid_group_id


class UnknownMemberIdError(KafkaError):
    error_code = ErrorCode.unknown_member_id


class RebalanceInProgressError(KafkaError):
    error_code = ErrorCode.rebalance_in_progress


class FencedInstanceIdError(KafkaError):
    error_code = ErrorCode.fenced_instance_id


class GroupIdNotFoundError(KafkaError):
    error_code = ErrorCode.group_id_not_found


class GroupMaxSizeReachedError(KafkaError):
    error_code = ErrorCode.group_max_size_reached


class FencedMemberEpochError(KafkaError):
    error_code = ErrorCode.fenced_member_epoch


class UnreleasedInstanceIdError(KafkaError):
    error_code = ErrorCode.unreleased_instance_id


class UnsupportedAssignorError(KafkaError):
    error_code = ErrorCode.unsupported_assignor


class StaleMemberEpochError(KafkaError):
    error_code = ErrorCode.stale_member_epoch


class InvalidRegularExpressionError(KafkaError):
    error_code = ErrorCode.invalid_regular_expression


class ReassignmentInProgressError(KafkaError):
    error_code = ErrorCode.reassignment_in_progress


class PreferredLeaderNotAvailableError(KafkaError):
    error_code = ErrorCode.preferred_leader_not_available


class EligibleLeadersNotAvailableError(KafkaError):
    error_code = ErrorCode.eligible_leaders_not_available


class ElectionNotNeededError(KafkaError):
    error_code = ErrorCode.election_not_needed


class NoReassignmentInProgressError(KafkaError):
    error_code = ErrorCode.no_reassignment_in_progress


class OffsetMovedToTieredStorageError(KafkaError):
    """A follower fetched below the leader's local log start (KIP-405): it rebuilds its
    state from the remote tier and fetches from there."""

    error_code = ErrorCode.offset_moved_to_tiered_storage


# Transaction coordinator errors (KIP-98, KIP-360, KIP-588).


class ProducerFencedError(KafkaError):
    """A newer producer instance holds the transactional id (Kafka's
    ProducerFencedException): fatal to the fenced client."""

    error_code = ErrorCode.producer_fenced


class ConcurrentTransactionsError(KafkaError):
    """The transactional id is between states: the client backs off and retries."""

    error_code = ErrorCode.concurrent_transactions


class InvalidProducerIdMappingError(KafkaError):
    error_code = ErrorCode.invalid_producer_id_mapping


class InvalidTransactionTimeoutError(KafkaError):
    error_code = ErrorCode.invalid_transaction_timeout


def _subclasses(cls: type[KafkaError]) -> list[type[KafkaError]]:
    found = []
    for sub in cls.__subclasses__():
        found.append(sub)
        found.extend(_subclasses(sub))
    return found


_BY_CODE: dict[ErrorCode, type[KafkaError]] = {}


def error_for_code(code: ErrorCode, message: str = "") -> KafkaError:
    """The exception for an error code another broker answered (Kafka's
    ``Errors.forCode(code).exception(message)``): the class named for it here, else a
    plain KafkaError subclass carrying the code."""
    if not _BY_CODE:
        for cls in _subclasses(KafkaError):
            _BY_CODE.setdefault(cls.error_code, cls)
    found = _BY_CODE.get(code)
    if found is None:
        name = "".join(part.title() for part in code.name.split("_")) + "Error"
        found = _BY_CODE[code] = type(name, (KafkaError,), {"error_code": code})
    return found(message)
