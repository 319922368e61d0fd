"""The errors of the quorum controller that the broker's request path never raises, each
carrying Kafka's error code (Kafka's ``org.apache.kafka.common.errors`` classes of the
same names)."""

from __future__ import annotations

from tiercel.protocol.errors import ErrorCode, KafkaError

__all__ = [
    "BrokerIdNotRegisteredError",
    "DuplicateBrokerRegistrationError",
    "InconsistentClusterIdError",
    "IneligibleReplicaError",
    "InvalidRegistrationError",
    "InvalidUpdateVersionError",
    "NewLeaderElectedError",
    "OperationNotAttemptedError",
    "StaleBrokerEpochError",
]


class StaleBrokerEpochError(KafkaError):
    error_code = ErrorCode.stale_broker_epoch


class DuplicateBrokerRegistrationError(KafkaError):
    error_code = ErrorCode.duplicate_broker_registration


class BrokerIdNotRegisteredError(KafkaError):
    error_code = ErrorCode.broker_id_not_registered


class InconsistentClusterIdError(KafkaError):
    error_code = ErrorCode.inconsistent_cluster_id


class InvalidRegistrationError(KafkaError):
    error_code = ErrorCode.invalid_registration


class InvalidUpdateVersionError(KafkaError):
    error_code = ErrorCode.invalid_update_version


class IneligibleReplicaError(KafkaError):
    error_code = ErrorCode.ineligible_replica


class NewLeaderElectedError(KafkaError):
    error_code = ErrorCode.new_leader_elected


class OperationNotAttemptedError(KafkaError):
    error_code = ErrorCode.operation_not_attempted
