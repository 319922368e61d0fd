"""Controlled shutdown, the broker's side: have the controller move this broker's
leaderships away before it stops.

Kafka's brokers sent ControlledShutdown requests to the controller; Tiercel asks through
the store, which every component already talks to: the broker creates the ephemeral
/admin/controlled_shutdown/<id>, and the controller moves the leadership of each
partition this broker leads to an ISR member that is not shutting down (a new leader
epoch) and takes this broker out of the ISRs it follows in. The broker waits until it
leads no partition that another live ISR member, not shutting down itself, could lead —
what Kafka's "no partitions remaining" answer meant. Each of
`controlled.shutdown.max.retries` attempts waits up to
`controlled.shutdown.retry.backoff.ms`; a new attempt re-creates the request so the
controller tries again the moves it could not make before (an ISR member was missing).
A partition with nowhere to go does not hold the shutdown up beyond that bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Final

from tiercel.config.broker_config import BrokerConfig
from tiercel.config.logging_setup import log_event
from tiercel.server.metadata import zk_data as zk
from tiercel.server.metadata.metadata_cache import MetadataCache
from tiercel.server.metadata.store import (
    CreateOp,
    DeleteOp,
    MetadataStore,
    MetadataStoreError,
    NodeExistsError,
    NoNodeError,
    Op,
)
from tiercel.storage.topic_partition import TopicPartition

_log: Final = logging.getLogger("tiercel.broker")


def movable_leaderships(cache: MetadataCache, broker_id: int) -> list[TopicPartition]:
    """The partitions `broker_id` leads that another ISR member could lead: registered
    (live) and not shutting down."""
    movable = []
    for name, topic in cache.topics.items():
        for partition, state in topic.states.items():
            if state.leader == broker_id and any(
                r != broker_id and cache.is_broker_isr_eligible(r) for r in state.isr
            ):
                movable.append(TopicPartition(name, partition))
    return sorted(movable)


class ControlledShutdown:
    """One broker's controlled shutdown. Event-loop only.

    Invariant: the request node, once created, stays until the store's session ends
    (the broker is shutting down from then on: the controller must not hand it
    leadership again)."""

    def __init__(self, config: BrokerConfig, store: MetadataStore, cache: MetadataCache) -> None:
        self._config = config
        self._store = store
        self._cache = cache

    async def run(self) -> bool:
        """True once this broker leads nothing that could move, False when the attempts
        ran out (or the store failed): the shutdown then goes on regardless."""
        config = self._config
        attempts = config.controlled_shutdown_max_retries
        backoff_s = config.controlled_shutdown_retry_backoff_ms / 1000
        loop = asyncio.get_running_loop()
        started = loop.time()
        remaining: list[TopicPartition] = []
        try:
            async with asyncio.timeout(attempts * backoff_s):
                for attempt in range(1, attempts + 1):
                    await self._request(renew=attempt > 1)
                    remaining = await self._wait_for_moves(backoff_s)
                    if not remaining:
                        log_event(
                            _log,
                            logging.INFO,
                            "controlled_shutdown_succeeded",
                            node_id=config.node_id,
                            attempts=attempt,
                            elapsed_ms=int((loop.time() - started) * 1000),
                        )
                        return True
                    log_event(
                        _log,
                        logging.WARNING,
                        "controlled_shutdown_retrying",
                        node_id=config.node_id,
                        attempt=attempt,
                        remaining=_names(remaining),
                    )
        except (TimeoutError, MetadataStoreError) as e:
            reason = "timed out" if isinstance(e, TimeoutError) else repr(e)
        else:
            reason = "retries exhausted"
        log_event(
            _log,
            logging.WARNING,
            "controlled_shutdown_failed",
            node_id=config.node_id,
            reason=reason,
            remaining=_names(remaining),
        )
        return False

    async def _request(self, renew: bool) -> None:
        path = zk.controlled_shutdown_path(self._config.node_id)
        if not renew:
            with contextlib.suppress(NodeExistsError):
                await self._store.create(path, ephemeral=True)
            log_event(
                _log, logging.INFO, "controlled_shutdown_requested", node_id=self._config.node_id
            )
            return
        # One transaction: the controller never sees this broker as not shutting down.
        ops: list[Op] = [CreateOp(path, ephemeral=True)]
        if await self._store.exists(path) is not None:
            ops.insert(0, DeleteOp(path))
        with contextlib.suppress(NoNodeError, NodeExistsError):
            await self._store.multi(ops)

    async def _wait_for_moves(self, timeout_s: float) -> list[TopicPartition]:
        """The leaderships still to move when none are left or after `timeout_s`."""
        node_id = self._config.node_id
        await self._cache.wait_until(lambda c: not movable_leaderships(c, node_id), timeout_s)
        return movable_leaderships(self._cache, node_id)


def _names(partitions: list[TopicPartition]) -> str:
    return ",".join(str(tp) for tp in partitions)
