"""MetadataListener: follows the MetadataStore and applies what changes.

Event-loop only. Watches cover the broker registrations and controlled-shutdown
requests, the controller node, the topic list, and per topic its assignment, partition
states and config overrides. A watch only marks a topic dirty; one refresher task
re-reads dirty topics from the store and hands each result to the replica manager, so a
burst of changes costs one read per topic and the broker always acts on the latest
state, never on an intermediate one.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable
from typing import Final

from tiercel.config.logging_setup import log_event
from tiercel.server.metadata import zk_data as zk
from tiercel.server.metadata.log_dir_event import (
    LOG_DIR_EVENT_NOTIFICATION_PATH,
    read_offline_replicas,
)
from tiercel.server.metadata.metadata_cache import MetadataCache, TopicMetadata
from tiercel.server.metadata.store import MetadataStore, NoNodeError, WatchEvent, WatchHandle

_log: Final = logging.getLogger("tiercel.metadata")

TopicChanged = Callable[[str, TopicMetadata | None], Awaitable[None]]


class _View(enum.Enum):
    """A cluster-wide part of the metadata, re-read as a whole when a watch marks it."""

    BROKERS = "brokers"
    CONTROLLER = "controller"
    TOPIC_LIST = "topic list"


class MetadataListener:
    def __init__(self, store: MetadataStore, cache: MetadataCache, on_topic: TopicChanged) -> None:
        self._store = store
        self._cache = cache
        self._on_topic = on_topic
        self._topic_watches: dict[str, list[WatchHandle]] = {}
        self._global_watches: list[WatchHandle] = []
        self._dirty: set[str] = set()
        self._wake = asyncio.Event()
        self._refresher: asyncio.Task[None] | None = None
        self._stale: set[_View] = set(_View)

    async def start(self) -> None:
        store = self._store
        self._global_watches = [
            await store.watch_children(zk.TOPICS_PATH, lambda _: self._mark(_View.TOPIC_LIST)),
            await store.watch_children(zk.BROKER_IDS_PATH, lambda _: self._mark(_View.BROKERS)),
            await store.watch_children(
                zk.CONTROLLED_SHUTDOWN_PATH, lambda _: self._mark(_View.BROKERS)
            ),
            await store.watch_children(
                LOG_DIR_EVENT_NOTIFICATION_PATH, lambda _: self._mark(_View.BROKERS)
            ),
            await store.watch_data(zk.CONTROLLER_PATH, lambda _: self._mark(_View.CONTROLLER)),
        ]
        await self._refresh_once()
        self._refresher = asyncio.get_running_loop().create_task(
            self._run(), name="metadata-refresher"
        )

    async def stop(self) -> None:
        if self._refresher is not None:
            self._refresher.cancel()
            await asyncio.gather(self._refresher, return_exceptions=True)
        for handle in self._global_watches:
            handle.cancel()
        for handles in self._topic_watches.values():
            for handle in handles:
                handle.cancel()

    def _mark(self, view: _View) -> None:
        self._stale.add(view)
        self._wake.set()

    def _mark_topic(self, topic: str) -> None:
        self._dirty.add(topic)
        self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self._refresh_once()
            except Exception as e:
                # A store hiccup: keep what we have, and try again on the next change.
                log_event(_log, logging.ERROR, "metadata_refresh_failed", reason=repr(e))
                await asyncio.sleep(0.5)
                self._wake.set()

    async def _refresh_once(self) -> None:
        # Each mark is cleared before its read (a change during the read marks it again)
        # and set back if the read fails, so that a store hiccup never loses a refresh.
        for view, refresh in (
            (_View.BROKERS, self._refresh_brokers),
            (_View.CONTROLLER, self._refresh_controller),
            (_View.TOPIC_LIST, self._refresh_topic_list),
        ):
            if view in self._stale:
                self._stale.discard(view)
                try:
                    await refresh()
                except Exception:
                    self._stale.add(view)
                    raise
        while self._dirty:
            topic = self._dirty.pop()
            try:
                await self._refresh_topic(topic)
            except Exception:
                self._dirty.add(topic)  # retried with the next round, never dropped
                raise

    async def _refresh_brokers(self) -> None:
        """Registrations, and the brokers whose controlled-shutdown request belongs to
        their current registration (not one left by an earlier session of theirs)."""
        store = self._store
        brokers = {}
        sessions = {}
        for child in await store.get_children(zk.BROKER_IDS_PATH):
            try:
                data, stat = await store.get(zk.broker_path(int(child)))
            except NoNodeError:
                continue
            brokers[int(child)] = zk.BrokerRegistration.decode(int(child), data)
            sessions[int(child)] = stat.ephemeral_owner
        shutting_down = set()
        for child in await store.get_children(zk.CONTROLLED_SHUTDOWN_PATH):
            request = await store.exists(zk.controlled_shutdown_path(int(child)))
            if request is not None and sessions.get(int(child)) == request.ephemeral_owner:
                shutting_down.add(int(child))
        self._cache.put_brokers(brokers, frozenset(shutting_down))
        # After the brokers, so that reading the log-dir events never delays them.
        self._cache.offline_replicas = await read_offline_replicas(store, sessions)

    async def _refresh_controller(self) -> None:
        try:
            data, _ = await self._store.get(zk.CONTROLLER_PATH)
            self._cache.set_controller(zk.decode_controller(data))
        except NoNodeError:
            self._cache.set_controller(-1)

    async def _refresh_topic_list(self) -> None:
        names = set(await self._store.get_children(zk.TOPICS_PATH))
        for name in names - self._topic_watches.keys():
            await self._watch_topic(name)
            self._dirty.add(name)
        for name in self._topic_watches.keys() - names:
            self._dirty.add(name)

    async def _watch_topic(self, name: str) -> None:
        def mark(_: WatchEvent) -> None:
            self._mark_topic(name)

        store = self._store
        self._topic_watches[name] = [
            await store.watch_data(zk.topic_path(name), mark),
            await store.watch_data(zk.topic_config_path(name), mark),
        ]

    async def _watch_partition_states(self, name: str, partitions: list[int]) -> None:
        handles = self._topic_watches.setdefault(name, [])
        have = len(handles) - 2
        for partition in partitions[max(have, 0) :]:
            handles.append(
                await self._store.watch_data(
                    zk.partition_state_path(name, partition), lambda _: self._mark_topic(name)
                )
            )

    async def _refresh_topic(self, name: str) -> None:
        topic = await self._read_topic(name)
        if topic is None:
            for handle in self._topic_watches.pop(name, []):
                handle.cancel()
            if self._cache.remove_topic(name) is not None:
                await self._on_topic(name, None)
            return
        self._cache.put_topic(topic)
        await self._on_topic(name, topic)

    async def _read_topic(self, name: str) -> TopicMetadata | None:
        store = self._store
        try:
            data, _ = await store.get(zk.topic_path(name))
        except NoNodeError:
            return None
        assignment = zk.TopicAssignment.decode(data)
        topic = TopicMetadata(name, assignment.topic_id, dict(assignment.partitions))
        # Watched before they are read: a state created in between is not missed.
        await self._watch_partition_states(name, sorted(assignment.partitions))
        for partition, replicas in assignment.partitions.items():
            try:
                state_data, stat = await store.get(zk.partition_state_path(name, partition))
            except NoNodeError:
                continue
            topic.states[partition] = zk.decode_partition_state(state_data, replicas, stat.version)
        try:
            config_data, _ = await store.get(zk.topic_config_path(name))
            topic.config_overrides = zk.decode_topic_config(config_data)
        except NoNodeError:
            pass
        return topic
