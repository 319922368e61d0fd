"""A KRaft broker's own topic creations — the internal topics it creates on first need
and Metadata's auto-creation — sent to the active controller as CreateTopics (Kafka's
DefaultAutoTopicCreationManager, which sends them over the broker's controller
channel). The broker's planned assignment and config overrides go as they are; the
controller checks them again, gives the topic its id, and every broker learns it from
the metadata log.
"""

from __future__ import annotations

from typing import Final

from tiercel.protocol.errors import (
    ErrorCode,
    TopicExistsError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from tiercel.server.admin_manager import CreatedTopic
from tiercel.server.node_to_controller_channel import (
    ControllerRequestTimeoutError,
    NodeToControllerChannel,
)

__all__ = ["ControllerTopicCreator"]

_CREATE_TOPICS: Final = 19
_VERSIONS: Final = (2, 7)


class ControllerTopicCreator:
    """Event-loop only."""

    def __init__(
        self, channel: NodeToControllerChannel, timeout_ms: int, retry_timeout_s: float
    ) -> None:
        self._channel = channel
        self._timeout_ms = timeout_ms
        self._retry_timeout_s = retry_timeout_s

    async def create_topic(self, name: str, planned: CreatedTopic) -> None:
        """Raises the KafkaError the controller answers (TopicExistsError included);
        UNKNOWN_TOPIC_OR_PARTITION when no active controller answers (a quorum without
        a majority), what Kafka's DefaultAutoTopicCreationManager.sendCreateTopicRequest
        tells clients while a creation is in flight, dropped on its onTimeout."""
        body = {
            "topics": [
                {
                    "name": name,
                    "num_partitions": -1,
                    "replication_factor": -1,
                    "assignments": [
                        {"partition_index": p, "broker_ids": list(replicas)}
                        for p, replicas in sorted(planned.assignment.items())
                    ],
                    "configs": [
                        {"name": k, "value": v} for k, v in sorted(planned.overrides.items())
                    ],
                }
            ],
            "timeout_ms": self._timeout_ms,
            "validate_only": False,
        }
        try:
            response = await self._channel.send(
                _CREATE_TOPICS, _VERSIONS, body, self._retry_timeout_s
            )
        except ControllerRequestTimeoutError as e:
            raise UnknownTopicOrPartitionError(f"{name} not created: {e}") from e
        for topic in response.topics:
            if topic.name != name or topic.error_code == ErrorCode.none:
                continue
            message = topic.error_message or f"CreateTopics {name}"
            if topic.error_code == ErrorCode.topic_already_exists:
                raise TopicExistsError(message)
            raise error_for_code(topic.error_code, message)
