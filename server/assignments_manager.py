"""A KRaft broker's replica placements, sent to the active controller as
AssignReplicasToDirs (KIP-858; Kafka's AssignmentsManager, Assignment and
AssignmentsManagerDeadlineFunction).

The controller records which log directory holds each replica (the PartitionRecord's
directories); until it knows, a replica on a broker with several log dirs is
UNASSIGNED, which counts as online, so a failed dir would move nothing. The broker
queues an assignment — (topic id, partition) into directory id — whenever it finds a
replica's log elsewhere than the metadata says, and this manager sends the queue in
batches of at most 2,250 (Kafka's MAX_ASSIGNMENTS_PER_REQUEST), one request in flight:

- a newer assignment of a partition replaces a queued one (only the latest placement
  matters), and one whose replica the metadata no longer puts on this broker (topic
  deleted, partition gone, replica moved away) is dropped before it is sent;
- a send waits 100 ms after the first queued assignment, so that those of one metadata
  delta go together, or goes at once when more than a request's worth is queued;
- a request that fails as a whole (no controller answered, or an error for all of it,
  such as STALE_BROKER_EPOCH before the broker's new registration is in its image) goes
  again after Kafka's exponential backoff (100 ms doubling to 10 s, 2 % jitter); a
  partition's own error puts it back in the queue unless a newer assignment replaced it.
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

from tiercel.config.logging_setup import log_event
from tiercel.protocol.errors import ErrorCode, UnsupportedVersionError
from tiercel.server.broker_lifecycle_manager import ControllerChannel
from tiercel.server.metadata.image.metadata_image import MetadataImage
from tiercel.storage.topic_partition import TopicIdPartition

__all__ = ["MAX_ASSIGNMENTS_PER_REQUEST", "Assignment", "AssignmentsManager", "ExponentialBackoff"]

_log: Final = logging.getLogger("tiercel.broker.assignments")

_ASSIGN_REPLICAS_TO_DIRS: Final = 73
_VERSIONS: Final = (0, 0)  # Kafka 4.0 has only v0
# Kafka's AssignReplicasToDirsRequest.MAX_ASSIGNMENTS_PER_REQUEST.
MAX_ASSIGNMENTS_PER_REQUEST: Final = 2250
# A partition's error is logged once its assignment is this old (Kafka's
# MIN_NOISY_FAILURE_INTERVAL_NS): a fresh topic's replicas may be refused briefly.
_MIN_NOISY_FAILURE_INTERVAL_S: Final = 120.0


@dataclass(frozen=True, slots=True)
class ExponentialBackoff:
    """Kafka's ExponentialBackoff: ``initial_s * multiplier ** attempts``, at most
    ``max_s``, times a random factor within ``jitter`` of 1."""

    initial_s: float
    multiplier: float
    max_s: float
    jitter: float

    def backoff(self, attempts: int) -> float:
        term = min(self.initial_s * self.multiplier ** min(attempts, 64), self.max_s)
        return min(term * random.uniform(1 - self.jitter, 1 + self.jitter), self.max_s)


# Kafka's AssignmentsManager.STANDARD_BACKOFF.
STANDARD_BACKOFF: Final = ExponentialBackoff(0.1, 2.0, 10.0, 0.02)


@dataclass(frozen=True, slots=True)
class Assignment:
    """This broker's replica of a partition placed in a log directory, queued at
    ``submission_time`` (the loop's clock)."""

    topic_id_partition: TopicIdPartition
    directory_id: uuid.UUID
    submission_time: float

    def valid(self, node_id: int, image: MetadataImage) -> bool:
        """Whether the metadata still has the replica on ``node_id`` (Kafka's
        Assignment.valid): the topic and partition exist and it is a replica."""
        topic = image.topics.topics_by_id.get(self.topic_id_partition.topic_id)
        if topic is None:
            return False
        partition = topic.partitions.get(self.topic_id_partition.topic_partition.partition)
        return partition is not None and node_id in partition.replicas


class AssignmentsManager:
    """Event-loop only. Invariants: at most one request is in flight, ``_inflight``
    holding what it carries; a partition is at most once in ``_ready`` (its latest
    assignment); ``_timer`` is the next send, at ``_send_at``."""

    def __init__(
        self,
        node_id: int,
        channel: ControllerChannel,
        image: Callable[[], MetadataImage],
        retry_timeout_s: float,
        backoff: ExponentialBackoff = STANDARD_BACKOFF,
    ) -> None:
        self._node_id = node_id
        self._channel = channel
        self._image = image
        self._retry_timeout_s = retry_timeout_s
        self._backoff = backoff
        self._ready: dict[TopicIdPartition, Assignment] = {}
        self._inflight: dict[TopicIdPartition, Assignment] = {}
        self._previous_global_failures = 0
        self._timer: asyncio.TimerHandle | None = None
        self._send_at = 0.0
        self._request: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def num_pending(self) -> int:
        """Assignments queued or in flight (Kafka's QueuedReplicaToDirAssignments)."""
        return len(self._ready) + len(self._inflight)

    def on_assignment(
        self, partition: TopicIdPartition, directory_id: uuid.UUID, reason: str
    ) -> None:
        """Queue ``partition``'s replica into ``directory_id``, replacing any queued one."""
        if self._closed:
            return
        now = asyncio.get_running_loop().time()
        self._ready[partition] = Assignment(partition, directory_id, now)
        log_event(
            _log,
            logging.DEBUG,
            "directory_assignment_queued",
            partition=partition,
            directory_id=directory_id,
            reason=reason,
        )
        self._reschedule(now)

    async def close(self) -> None:
        """Stop sending; queued assignments are dropped (the next start finds the logs
        where they are and assigns them again)."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._request is not None:
            self._request.cancel()
            await asyncio.gather(self._request, return_exceptions=True)
        self._channel.close()

    def _reschedule(self, now: float) -> None:
        """Schedule the next send, keeping an earlier one already scheduled (Kafka's
        AssignmentsManagerDeadlineFunction)."""
        if self._closed:
            return
        if self._previous_global_failures > 0:
            delay = self._backoff.backoff(self._previous_global_failures)
        elif len(self._ready) > MAX_ASSIGNMENTS_PER_REQUEST and not self._inflight:
            delay = 0.0
        else:
            delay = self._backoff.initial_s  # to batch what one delta queues
        send_at = now + delay
        if self._timer is not None:
            if self._send_at <= send_at:
                return
            self._timer.cancel()
        self._send_at = send_at
        self._timer = asyncio.get_running_loop().call_at(send_at, self._maybe_send_assignments)

    def _maybe_send_assignments(self) -> None:
        self._timer = None
        if self._inflight:
            return  # the response reschedules
        image = self._image()
        batch: dict[TopicIdPartition, Assignment] = {}
        taken = []
        for partition, assignment in self._ready.items():
            if len(batch) >= MAX_ASSIGNMENTS_PER_REQUEST:
                break
            taken.append(partition)
            if assignment.valid(self._node_id, image):
                batch[partition] = assignment
        for partition in taken:
            del self._ready[partition]
        log_event(
            _log,
            logging.INFO,
            "directory_assignments_sending",
            node_id=self._node_id,
            assignments=len(batch),
            invalidated=len(taken) - len(batch),
        )
        if batch:
            self._inflight = batch
            broker_epoch = image.cluster.broker_epoch(self._node_id)
            self._request = asyncio.get_running_loop().create_task(
                self._send(broker_epoch, batch), name="directory-assignments"
            )

    async def _send(self, broker_epoch: int, sent: dict[TopicIdPartition, Assignment]) -> None:
        body = _request_body(self._node_id, broker_epoch, sent)
        try:
            response = await self._channel.send(
                _ASSIGN_REPLICAS_TO_DIRS, _VERSIONS, body, self._retry_timeout_s
            )
        except (TimeoutError, OSError, UnsupportedVersionError) as e:
            self._handle_global_failure(sent, repr(e))
        else:
            if response.error_code != ErrorCode.none:
                self._handle_global_failure(sent, f"error code {int(response.error_code)}")
            else:
                self._handle_response(sent, response)
        if self._ready:
            self._reschedule(asyncio.get_running_loop().time())

    def _handle_global_failure(self, sent: dict[TopicIdPartition, Assignment], reason: str) -> None:
        self._inflight = {}
        self._previous_global_failures += 1
        # A warning (Kafka: an error): a restarting broker's first request may carry
        # the epoch its image still holds, its previous registration's, and be refused.
        log_event(
            _log,
            logging.WARNING,
            "directory_assignments_failed",
            node_id=self._node_id,
            assignments=len(sent),
            reason=reason,
        )
        self._put_back(sent.values())

    def _handle_response(self, sent: dict[TopicIdPartition, Assignment], response: Any) -> None:
        """Each partition's result (Kafka's handleResponse): done, or queued again unless
        a newer assignment was queued meanwhile; one the answer misses is queued again."""
        self._inflight = {}
        self._previous_global_failures = 0
        now = asyncio.get_running_loop().time()
        unanswered = {(p.topic_id, p.topic_partition.partition): a for p, a in sent.items()}
        for directory in response.directories:
            for topic in directory.topics:
                for result in topic.partitions:
                    key = (topic.topic_id, int(result.partition_index))
                    assignment = unanswered.pop(key, None)
                    if assignment is None or result.error_code == ErrorCode.none:
                        continue
                    self._put_back((assignment,))
                    if now > assignment.submission_time + _MIN_NOISY_FAILURE_INTERVAL_S:
                        log_event(
                            _log,
                            logging.ERROR,
                            "directory_assignment_refused",
                            partition=str(assignment.topic_id_partition),
                            error=int(result.error_code),
                        )
        if unanswered:
            log_event(
                _log,
                logging.ERROR,
                "directory_assignments_unanswered",
                partitions=",".join(str(a.topic_id_partition) for a in unanswered.values()),
            )
            self._put_back(unanswered.values())

    def _put_back(self, assignments: Iterable[Assignment]) -> None:
        for assignment in assignments:
            self._ready.setdefault(assignment.topic_id_partition, assignment)


def _request_body(
    node_id: int, broker_epoch: int, assignments: dict[TopicIdPartition, Assignment]
) -> dict[str, Any]:
    """AssignReplicasToDirs v0: directories, each with its topics and their partitions
    (Kafka's AssignmentsManager.buildRequestData)."""
    by_directory: dict[uuid.UUID, dict[uuid.UUID, list[int]]] = {}
    for partition, assignment in assignments.items():
        topics = by_directory.setdefault(assignment.directory_id, {})
        topics.setdefault(partition.topic_id, []).append(partition.topic_partition.partition)
    return {
        "broker_id": node_id,
        "broker_epoch": broker_epoch,
        "directories": [
            {
                "id_": directory,
                "topics": [
                    {
                        "topic_id": topic_id,
                        "partitions": [{"partition_index": p} for p in partitions],
                    }
                    for topic_id, partitions in topics.items()
                ],
            }
            for directory, topics in by_directory.items()
        ],
    }
