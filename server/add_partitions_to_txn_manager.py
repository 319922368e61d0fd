"""AddPartitionsToTxnManager: a partition leader asks transaction coordinators whether
partitions are in a producer's ongoing transaction (KIP-890 part 1; Kafka's
AddPartitionsToTxnManager).

`verify_transaction` finds the coordinator of the transactional id (the live leader of
its __transaction_state partition, on the inter-broker listener) and queues the
question for it; questions for one coordinator are batched into a single
AddPartitionsToTxn v4+ request (one entry per transactional id, verify_only) with at
most one request in flight per coordinator, so a burst of first writes costs a round
trip per coordinator, not per partition. The answer is the partitions that were not
verified and why, mapped as Kafka maps them for an append:

- no coordinator known: COORDINATOR_NOT_AVAILABLE;
- the coordinator cannot be reached or does not answer in time: NETWORK_EXCEPTION;
- it does not support a verify_only AddPartitionsToTxn (before v4): nothing is
  unverified (Kafka skips verification against such a broker);
- a request-level error: that error for all (CLUSTER_AUTHORIZATION_FAILED becomes
  INVALID_TXN_STATE: the client must not see the broker's authorization problem);
- PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH (what producers expect on a produce),
  TRANSACTION_ABORTABLE becomes INVALID_TXN_STATE (clients before Produce v12 /
  TxnOffsetCommit v5 do not know it: Kafka's defaultError operation).

When this broker is itself the coordinator, the question is answered in process
(`local_verify`, the same check the AddPartitionsToTxn handler makes) instead of
through a connection to itself as Kafka's NetworkClient does: the same answer, without
the round trip, which cost about 1.4 ms per transaction's first write to a partition.

A second question for a transactional id already queued replaces it: a newer epoch
fences the queued one (INVALID_PRODUCER_EPOCH), the same epoch makes it NETWORK_EXCEPTION
(the client is retrying; it gets a retriable error), an older epoch is itself fenced.

Event-loop only.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from tiercel.config.logging_setup import log_event
from tiercel.config.sasl_config import SaslLogin
from tiercel.protocol.client_frames import FrameError
from tiercel.protocol.errors import ErrorCode, KafkaError, UnsupportedVersionError
from tiercel.server.coordinator.transaction.transaction_config import (
    TRANSACTION_STATE_TOPIC_NAME,
)
from tiercel.server.metadata.metadata_cache import MetadataCache
from tiercel.server.replication.broker_client import BrokerClients
from tiercel.storage.topic_partition import TopicPartition

__all__ = ["AddPartitionsToTxnManager", "unverified_partitions"]

ADD_PARTITIONS_TO_TXN_KEY: Final = 24
# v4 is the first batched form with verify_only (KIP-890).
_VERIFY_VERSIONS: Final = (4, 5)
_log: Final = logging.getLogger("tiercel.add_partitions_to_txn")

# Kafka's AddPartitionsToTxnManager maps these coordinator answers for an append.
_PARTITION_ERROR_MAPPING: Final = {
    ErrorCode.producer_fenced: ErrorCode.invalid_producer_epoch,
    ErrorCode.transaction_abortable: ErrorCode.invalid_txn_state,
}
# Failures to talk to the coordinator at all.
_NETWORK_FAILURES: Final = (OSError, TimeoutError, EOFError, FrameError, KafkaError)

Unverified = dict[TopicPartition, ErrorCode]
# (transactional id, producer id, epoch, partitions) -> each partition's answer.
LocalVerify = Callable[
    [str, int, int, Sequence[TopicPartition]], Mapping[TopicPartition, ErrorCode]
]


@dataclass(slots=True)
class _Question:
    """One transactional id's partitions waiting to be verified."""

    producer_id: int
    producer_epoch: int
    partitions: tuple[TopicPartition, ...]
    answer: asyncio.Future[Unverified]

    def reply(self, unverified: Unverified) -> None:
        if not self.answer.done():  # the produce may have been cancelled meanwhile
            self.answer.set_result(unverified)

    def fail(self, error: ErrorCode) -> None:
        self.reply(dict.fromkeys(self.partitions, error))


class AddPartitionsToTxnManager:
    """Invariants: ``_queued[node]`` holds the questions not yet sent to ``node``, at
    most one per transactional id; ``_senders[node]`` runs while ``node`` has a request
    in flight or questions queued. Event-loop only."""

    def __init__(
        self,
        node_id: int,
        cache: MetadataCache,
        partition_for: Callable[[str], int],
        inter_broker_listener: str,
        request_timeout_ms: int,
        local_verify: LocalVerify | None = None,
        ssl_context: ssl.SSLContext | None = None,
        sasl_login: SaslLogin | None = None,
    ) -> None:
        self._node_id = node_id
        self._local_verify = local_verify
        self._cache = cache
        self._partition_for = partition_for
        self._listener = inter_broker_listener
        self._queued: dict[int, dict[str, _Question]] = {}
        self._senders: dict[int, asyncio.Task[None]] = {}
        self._clients = BrokerClients(
            lambda broker_id: cache.broker_endpoint(broker_id, inter_broker_listener),
            f"tiercel-add-partitions-to-txn-{node_id}",
            request_timeout_ms / 1000,
            ssl_context,
            sasl_login,
        )
        self._closed = False
        self.requests_sent = 0  # AddPartitionsToTxn requests, batching included

    async def verify_transaction(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> Unverified:
        """The partitions the coordinator did not confirm as part of the producer's
        ongoing transaction, with the error for each; empty when all are."""
        tps = tuple(partitions)
        node = None if self._closed else self._coordinator(transactional_id)
        if node is None:
            return dict.fromkeys(tps, ErrorCode.coordinator_not_available)
        if node == self._node_id and self._local_verify is not None:
            answers = self._local_verify(transactional_id, producer_id, producer_epoch, tps)
            return _unverified(answers)
        loop = asyncio.get_running_loop()
        question = _Question(producer_id, producer_epoch, tps, loop.create_future())
        queued = self._queued.setdefault(node, {})
        existing = queued.get(transactional_id)
        if existing is not None:
            if existing.producer_epoch > producer_epoch:
                return dict.fromkeys(tps, ErrorCode.invalid_producer_epoch)
            existing.fail(
                ErrorCode.invalid_producer_epoch
                if existing.producer_epoch < producer_epoch
                else ErrorCode.network_exception
            )
        queued[transactional_id] = question
        if node not in self._senders:
            self._senders[node] = asyncio.get_running_loop().create_task(
                self._send_queued(node), name=f"add-partitions-to-txn-sender-{node}"
            )
        return await question.answer

    def _coordinator(self, transactional_id: str) -> int | None:
        """The live broker leading the id's __transaction_state partition, if any."""
        tp = TopicPartition(TRANSACTION_STATE_TOPIC_NAME, self._partition_for(transactional_id))
        state = self._cache.partition_state(tp)
        if (
            state is None
            or state.leader < 0
            or self._cache.broker_endpoint(state.leader, self._listener) is None
        ):
            return None
        return state.leader

    async def _send_queued(self, node: int) -> None:
        """Send what is queued for ``node``, one request at a time, until nothing is."""
        try:
            while self._queued.get(node):
                batch = self._queued.pop(node)
                try:
                    await self._send(node, batch)
                except Exception as e:  # a bug: never leave a produce waiting for good
                    log_event(
                        _log, logging.ERROR, "txn_verification_failed", node=node, reason=repr(e)
                    )
                    self._fail_all(batch, ErrorCode.unknown_server_error)
                except asyncio.CancelledError:
                    self._fail_all(batch, ErrorCode.network_exception)
                    raise
        finally:
            # No await between the emptiness check and this: a question queued later
            # starts a new sender.
            del self._senders[node]

    async def _send(self, node: int, batch: Mapping[str, _Question]) -> None:
        body = {"transactions": [_transaction(tid, q) for tid, q in batch.items()]}
        self.requests_sent += 1
        try:
            _, response = await self._clients.get(node).request(
                ADD_PARTITIONS_TO_TXN_KEY, _VERIFY_VERSIONS, body
            )
        except UnsupportedVersionError as e:
            log_event(
                _log, logging.WARNING, "txn_verification_unsupported", node=node, reason=str(e)
            )
            for question in batch.values():
                question.reply({})
            return
        except _NETWORK_FAILURES as e:
            log_event(
                _log, logging.WARNING, "txn_verification_send_failed", node=node, reason=repr(e)
            )
            self._fail_all(batch, ErrorCode.network_exception)
            return
        answers = unverified_partitions(response)
        if isinstance(answers, ErrorCode):
            log_event(
                _log, logging.ERROR, "txn_verification_refused", node=node, error=answers.name
            )
            self._fail_all(batch, answers)
            return
        for transactional_id, question in batch.items():
            unverified = answers.get(transactional_id)
            if unverified is None:  # not answered: a broker bug; let the client retry
                question.fail(ErrorCode.network_exception)
            else:
                question.reply(unverified)

    def _fail_all(self, batch: Mapping[str, _Question], error: ErrorCode) -> None:
        for question in batch.values():
            question.fail(error)

    async def shutdown(self) -> None:
        """Stop sending; questions still waiting get NETWORK_EXCEPTION."""
        self._closed = True
        senders = list(self._senders.values())
        for sender in senders:
            sender.cancel()
        await asyncio.gather(*senders, return_exceptions=True)
        for batch in self._queued.values():
            self._fail_all(batch, ErrorCode.network_exception)
        self._queued.clear()
        self._clients.close()


def _transaction(transactional_id: str, question: _Question) -> dict[str, Any]:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for tp in question.partitions:
        by_topic[tp.topic].append(tp.partition)
    return {
        "transactional_id": transactional_id,
        "producer_id": question.producer_id,
        "producer_epoch": question.producer_epoch,
        "verify_only": True,
        "topics": [{"name": name, "partitions": ps} for name, ps in by_topic.items()],
    }


def unverified_partitions(response: Any) -> ErrorCode | dict[str, Unverified]:
    """An AddPartitionsToTxn v4+ response as the unverified partitions of each
    transactional id (errors mapped for an append), or the error for all of them."""
    top = ErrorCode(response.error_code)
    if top != ErrorCode.none:
        return ErrorCode.invalid_txn_state if top == ErrorCode.cluster_authorization_failed else top
    answers: dict[str, Unverified] = {}
    for result in response.results_by_transaction:
        answers[result.transactional_id] = _unverified(
            {
                TopicPartition(topic.name, partition.partition_index): ErrorCode(
                    partition.partition_error_code
                )
                for topic in result.topic_results
                for partition in topic.results_by_partition
            }
        )
    return answers


def _unverified(answers: Mapping[TopicPartition, ErrorCode]) -> Unverified:
    return {
        tp: _PARTITION_ERROR_MAPPING.get(error, error)
        for tp, error in answers.items()
        if error != ErrorCode.none
    }
