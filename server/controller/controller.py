"""Controller: the one broker that turns assignments and broker liveness into leadership.

Kafka's ZooKeeper-mode KafkaController on the MetadataStore. Election is the ephemeral
/controller node, created in one transaction with the bump of /controller_epoch; every
write of the active controller checks that epoch (see `ControllerStore`), so a deposed
controller cannot change anything. The active controller

- gives new partitions their first state and carries out topic deletions;
- follows broker liveness (/brokers/ids): partitions led by a lost broker get a new leader
  from the live ISR (or an out-of-sync replica where unclean election is allowed), lost
  brokers leave ISRs, and returning brokers bring offline partitions back;
- moves leadership off brokers that ask for a controlled shutdown
  (/admin/controlled_shutdown/<id>);
- rebalances leadership to preferred replicas (auto.leader.rebalance.enable) and serves
  ElectLeaders, AlterPartitionReassignments and ListPartitionReassignments.

Watches only mark what changed; one task handles the marks in order under a lock that
the API calls also take (Kafka's single controller event thread), re-reading what it
needs, so bursts of changes coalesce and the latest state always wins.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Final

from tiercel.config.broker_config import BrokerConfig
from tiercel.config.logging_setup import log_event
from tiercel.protocol.errors import (
    KafkaError,
    NotControllerError,
)
from tiercel.server.controller.controller_context import (
    BrokerEpoch,
    ControllerContext,
    TopicContext,
)
from tiercel.server.controller.controller_store import ControllerMovedError, ControllerStore
from tiercel.server.controller.leader_balance import partitions_to_rebalance
from tiercel.server.controller.log_dir_failure import on_log_dir_events
from tiercel.server.controller.partition_state_machine import PartitionStateMachine
from tiercel.server.controller.reassignment import Reassignments, Target
from tiercel.server.controller.replica_assignment import ReplicaAssignment
from tiercel.server.controller.replica_leader_election import ElectionType, elect_leaders
from tiercel.server.metadata import zk_data as zk
from tiercel.server.metadata.log_dir_event import LOG_DIR_EVENT_NOTIFICATION_PATH
from tiercel.server.metadata.store import (
    BadVersionError,
    CreateOp,
    MetadataStore,
    MetadataStoreError,
    NodeExistsError,
    NoNodeError,
    SetOp,
    Stat,
    WatchEvent,
    WatchHandle,
)
from tiercel.storage.topic_partition import TopicPartition

_log: Final = logging.getLogger("tiercel.controller")
# Kafka checks leader balance 5 s after a failover, then every
# leader.imbalance.check.interval.seconds.
_FIRST_REBALANCE_CHECK_S: Final = 5.0
_RETRY_AFTER_ERROR_S: Final = 0.5


@dataclass(slots=True)
class _Pending:
    """What watches reported and the controller has not handled yet."""

    controller: bool = True
    resync: bool = False
    brokers: bool = False
    shutdowns: bool = False
    topics: bool = False
    deletions: bool = False
    rebalance: bool = False
    modified_topics: set[str] = field(default_factory=set)
    topic_configs: set[str] = field(default_factory=set)
    isr_changes: set[TopicPartition] = field(default_factory=set)


@dataclass(slots=True)
class _Active:
    """The parts that exist while this broker is the active controller."""

    store: ControllerStore
    context: ControllerContext
    states: PartitionStateMachine
    reassignments: Reassignments
    topic_watches: dict[str, list[WatchHandle]] = field(default_factory=dict)
    rebalance_timer: asyncio.Task[None] | None = None


class Controller:
    """Invariants: `is_active` iff `_active` is set, which happens only after this
    broker's transaction created /controller and bumped /controller_epoch to `epoch`.
    Event-loop only."""

    def __init__(self, config: BrokerConfig, store: MetadataStore) -> None:
        self.node_id = config.node_id
        self._config = config
        self._store = store
        self.epoch = 0
        self._active: _Active | None = None
        self._pending = _Pending()
        self._watches: list[WatchHandle] = []
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    @property
    def is_active(self) -> bool:
        return self._active is not None

    async def startup(self) -> None:
        store, pending = self._store, self._pending
        self._watches = [
            await store.watch_data(zk.CONTROLLER_PATH, lambda _: self._mark("controller")),
            await store.watch_children(zk.BROKER_IDS_PATH, lambda _: self._mark("brokers")),
            await store.watch_children(zk.TOPICS_PATH, lambda _: self._mark("topics")),
            await store.watch_children(zk.DELETE_TOPICS_PATH, lambda _: self._mark("deletions")),
            await store.watch_children(
                zk.CONTROLLED_SHUTDOWN_PATH, lambda _: self._mark("shutdowns")
            ),
            await store.watch_children(
                LOG_DIR_EVENT_NOTIFICATION_PATH, lambda _: self._mark("brokers")
            ),
        ]
        pending.controller = True
        async with self._lock:
            await self._process()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="controller")

    async def shutdown(self) -> None:
        for handle in self._watches:
            handle.cancel()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._active is not None:
            # Best effort: with ZooKeeper away the node goes with the session anyway, and
            # the broker must still close its logs cleanly.
            with contextlib.suppress(MetadataStoreError):
                _, stat = await self._store.get(zk.CONTROLLER_PATH)
                if stat.ephemeral_owner == self._store.session_id:
                    await self._store.delete(zk.CONTROLLER_PATH, expected_version=stat.version)
            self._resign()

    # -- admin APIs (Kafka sends them to the controller; others answer NOT_CONTROLLER) --

    async def elect_leaders(
        self, partitions: Collection[TopicPartition], election_type: ElectionType
    ) -> dict[TopicPartition, int | KafkaError]:
        """ElectLeaders: per partition its new leader, or why there is none."""
        async with self._lock:
            active = self._active
            if active is None:
                return {tp: _not_controller() for tp in partitions}
            deleting = await self._store.get_children(zk.DELETE_TOPICS_PATH)
            try:
                return await elect_leaders(
                    active.context,
                    active.store,
                    active.states,
                    partitions,
                    election_type,
                    deleting,
                )
            except ControllerMovedError:
                self._moved()
                return {tp: _not_controller() for tp in partitions}

    async def alter_partition_reassignments(
        self, targets: Mapping[TopicPartition, Target], allow_rf_change: bool
    ) -> dict[TopicPartition, KafkaError | None]:
        """Raises NotControllerError unless this broker is the controller."""
        async with self._lock:
            active = self._require_active()
            deleting = await self._store.get_children(zk.DELETE_TOPICS_PATH)
            try:
                return await active.reassignments.alter(targets, allow_rf_change, deleting)
            except ControllerMovedError:
                self._moved()
                raise _not_controller() from None

    async def list_partition_reassignments(
        self, partitions: Collection[TopicPartition] | None
    ) -> dict[TopicPartition, ReplicaAssignment]:
        """Raises NotControllerError unless this broker is the controller."""
        async with self._lock:
            return self._require_active().reassignments.list(partitions)

    def _require_active(self) -> _Active:
        if self._active is None:
            raise _not_controller()
        return self._active

    # -- the event loop ----------------------------------------------------------------

    def _mark(self, kind: str) -> None:
        setattr(self._pending, kind, True)
        self._wake.set()

    def _mark_isr(self, tp: TopicPartition) -> None:
        self._pending.isr_changes.add(tp)
        self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            async with self._lock:
                failed = await self._process_safely()
            if failed:
                await asyncio.sleep(_RETRY_AFTER_ERROR_S)
                self._wake.set()

    async def _process_safely(self) -> bool:
        try:
            await self._process()
        except ControllerMovedError as e:
            log_event(_log, logging.WARNING, "controller_moved", reason=str(e))
            self._moved()
        except Exception as e:
            # Whatever was half done is redone from the store's state.
            log_event(_log, logging.ERROR, "controller_error", reason=repr(e))
            self._pending.resync = True
            if self._active is None:
                # The election itself failed (ZooKeeper reports /controller gone once):
                # check and run it again, or no broker might ever become controller.
                self._pending.controller = True
            return True
        return False

    def _moved(self) -> None:
        self._resign()
        self._pending.controller = True
        self._wake.set()

    async def _process(self) -> None:
        pending = self._pending
        if pending.controller:
            pending.controller = False
            await self._check_controller()
        active = self._active
        if active is None:
            self._pending = _Pending(controller=False)
            return
        if pending.resync:
            pending.resync = False
            await self._initialize(active)
        if pending.brokers:
            pending.brokers = False
            await self._on_broker_change(active)
            # Kafka's processLogDirEventNotification (its watch marks brokers too); also
            # after a broker change, whose elections know live brokers, not failed dirs.
            await on_log_dir_events(active.context, active.store)
        if pending.shutdowns:
            pending.shutdowns = False
            await self._on_shutdown_requests(active)
        if pending.topics:
            pending.topics = False
            await self._sync_topics(active)
        modified, pending.modified_topics = pending.modified_topics, set()
        for name in sorted(modified):
            await self._on_topic_modified(active, name)
        configs, pending.topic_configs = pending.topic_configs, set()
        for name in sorted(configs):
            await self._on_topic_config(active, name)
        if pending.deletions:
            pending.deletions = False
            await self._on_deletions(active)
        isr_changes, pending.isr_changes = pending.isr_changes, set()
        for tp in sorted(isr_changes):
            await active.reassignments.maybe_complete(tp)
        if pending.rebalance:
            pending.rebalance = False
            await self._check_leader_balance(active)

    # -- election ----------------------------------------------------------------------

    async def _check_controller(self) -> None:
        try:
            data, stat = await self._store.get(zk.CONTROLLER_PATH)
        except NoNodeError:
            self._resign()
            await self._elect()
            return
        ours = stat.ephemeral_owner == self._store.session_id and (
            zk.decode_controller(data) == self.node_id
        )
        if not ours:
            self._resign()
        elif self._active is None:
            # Our node from a failed takeover: give it up so that an election follows.
            with contextlib.suppress(NoNodeError, BadVersionError):
                await self._store.delete(zk.CONTROLLER_PATH, expected_version=stat.version)

    async def _elect(self) -> None:
        try:
            data, stat = await self._store.get(zk.CONTROLLER_EPOCH_PATH)
        except NoNodeError:
            with contextlib.suppress(NodeExistsError):
                await self._store.create(zk.CONTROLLER_EPOCH_PATH, b"0")
            data, stat = await self._store.get(zk.CONTROLLER_EPOCH_PATH)
        epoch = int(data) + 1
        try:
            results = await self._store.multi(
                [
                    CreateOp(zk.CONTROLLER_PATH, zk.encode_controller(self.node_id), True),
                    SetOp(zk.CONTROLLER_EPOCH_PATH, str(epoch).encode(), stat.version),
                ]
            )
        except (NodeExistsError, BadVersionError):
            return  # another broker won; the /controller watch says when it is gone
        epoch_stat = results[1]
        assert isinstance(epoch_stat, Stat)
        self.epoch = epoch
        store = ControllerStore(self._store, epoch, epoch_stat.version)
        context = ControllerContext()
        states = PartitionStateMachine(self._config, context, store)
        active = _Active(
            store, context, states, Reassignments(context, store, states, self._watch_state)
        )
        self._active = active
        log_event(
            _log, logging.INFO, "controller_elected", node_id=self.node_id, controller_epoch=epoch
        )
        self._pending = _Pending(controller=False)
        if self._config.auto_leader_rebalance_enable:
            active.rebalance_timer = asyncio.get_running_loop().create_task(
                self._rebalance_timer(), name="controller-rebalance"
            )
        await self._initialize(active)

    def _resign(self) -> None:
        active, self._active = self._active, None
        if active is None:
            return
        for handles in active.topic_watches.values():
            for handle in handles:
                handle.cancel()
        active.reassignments.close()
        if active.rebalance_timer is not None:
            active.rebalance_timer.cancel()
        log_event(
            _log,
            logging.INFO,
            "controller_resigned",
            node_id=self.node_id,
            controller_epoch=self.epoch,
        )

    async def _watch_state(self, tp: TopicPartition) -> WatchHandle:
        return await self._store.watch_data(
            zk.partition_state_path(tp.topic, tp.partition), lambda _: self._mark_isr(tp)
        )

    async def _rebalance_timer(self) -> None:
        interval = float(self._config.leader_imbalance_check_interval_seconds)
        delay = min(_FIRST_REBALANCE_CHECK_S, interval)
        while True:
            await asyncio.sleep(delay)
            delay = interval
            self._mark("rebalance")

    # -- failover: everything from the store (also after an error) ----------------------

    async def _initialize(self, active: _Active) -> None:
        """Kafka's onControllerFailover: read the cluster, then bring every partition to
        where it should be. Idempotent."""
        context = active.context
        context.live_brokers = await self._read_brokers()
        context.shutting_down = await self._read_shutting_down(context)
        await self._sync_topics(active)
        replicas = {tp: a.replicas for tp, a in context.all_partitions()}
        states = await active.store.read_states(replicas)
        await active.states.initialize(replicas.keys() - states.keys())
        live = context.live_broker_ids
        registered = context.live_or_shutting_down_ids
        dead = {r for rs in replicas.values() for r in rs if r not in registered}
        offline = {
            tp: replicas[tp]
            for tp, state in states.items()
            if state.leader not in live or any(r in dead for r in state.isr)
        }
        await active.states.on_replicas_offline(offline, dead)
        await active.reassignments.resume(lambda _: True)
        await self._on_deletions(active)
        for broker in sorted(context.shutting_down):
            await active.states.shut_down_broker(broker)
        await on_log_dir_events(context, active.store)

    async def _read_brokers(self) -> dict[int, BrokerEpoch]:
        brokers = {}
        for child in await self._store.get_children(zk.BROKER_IDS_PATH):
            stat = await self._store.exists(zk.broker_path(int(child)))
            if stat is not None:
                brokers[int(child)] = BrokerEpoch(stat.czxid, stat.ephemeral_owner)
        return brokers

    async def _read_shutting_down(self, context: ControllerContext) -> set[int]:
        """Brokers asking for a controlled shutdown from their current registration (a
        request left by an earlier session of a broker does not count)."""
        shutting_down = set()
        for child in await self._store.get_children(zk.CONTROLLED_SHUTDOWN_PATH):
            broker = int(child)
            stat = await self._store.exists(zk.controlled_shutdown_path(broker))
            registration = context.live_brokers.get(broker)
            owner = None if registration is None else registration.session
            if stat is not None and owner == stat.ephemeral_owner:
                shutting_down.add(broker)
        return shutting_down

    # -- brokers -----------------------------------------------------------------------

    async def _on_broker_change(self, active: _Active) -> None:
        """Kafka's processBrokerChange: a broker registered again since the last look
        (bounced: a greater broker epoch, as after a restart within the session timeout
        whose deregistration and registration arrive together) is handled as lost, then
        as new."""
        context = active.context
        current = await self._read_brokers()
        known = context.live_brokers
        new = current.keys() - known.keys()
        dead = known.keys() - current.keys()
        bounced = {b for b in current.keys() & known.keys() if current[b].epoch != known[b].epoch}
        if not (new or dead or bounced):
            return
        log_event(
            _log,
            logging.INFO,
            "brokers_changed",
            new=_ids(new),
            dead=_ids(dead),
            bounced=_ids(bounced),
            live=_ids(current),
        )
        context.live_brokers = {b: s for b, s in current.items() if b not in bounced}
        context.shutting_down &= context.live_brokers.keys()
        gone = dead | bounced
        if gone:
            await active.states.on_replicas_offline(context.partitions_on(gone), gone)
        context.live_brokers = current
        started = new | bounced
        if started:
            await active.states.initialize(set(context.new_partitions))
            await active.states.elect_offline(context.partitions_on(started), False)
            await active.reassignments.resume(
                lambda a: any(b in started for b in a.target_replicas)
            )

    async def _on_shutdown_requests(self, active: _Active) -> None:
        """Kafka's doControlledShutdown for every broker asking: each retry of a broker
        re-creates its request, so moves that were not possible earlier are tried again."""
        context = active.context
        context.shutting_down = await self._read_shutting_down(context)
        for broker in sorted(context.shutting_down):
            log_event(_log, logging.INFO, "controlled_shutdown", broker=broker)
            await active.states.shut_down_broker(broker)

    # -- topics ------------------------------------------------------------------------

    async def _sync_topics(self, active: _Active) -> None:
        """Kafka's processTopicChange: forget deleted topics, take in new ones."""
        context = active.context
        names = set(await self._store.get_children(zk.TOPICS_PATH))
        for gone in context.topics.keys() - names:
            self._forget_topic(active, gone)
        added: list[TopicPartition] = []
        for name in sorted(names - context.topics.keys()):
            if name not in active.topic_watches:
                active.topic_watches[name] = await self._watch_topic(name)
            topic = await self._read_topic(name)
            if topic is not None:
                context.put_topic(name, topic)
                added.extend(TopicPartition(name, p) for p in topic.partitions)
        await active.states.initialize(added)

    async def _watch_topic(self, name: str) -> list[WatchHandle]:
        def topic_changed(_: WatchEvent) -> None:
            self._pending.modified_topics.add(name)
            self._wake.set()

        def config_changed(_: WatchEvent) -> None:
            self._pending.topic_configs.add(name)
            self._wake.set()

        return [
            await self._store.watch_data(zk.topic_path(name), topic_changed),
            await self._store.watch_data(zk.topic_config_path(name), config_changed),
        ]

    async def _read_topic(self, name: str) -> TopicContext | None:
        try:
            data, stat = await self._store.get(zk.topic_path(name))
        except NoNodeError:
            return None
        return TopicContext.from_znode(zk.TopicAssignment.decode(data), stat.version)

    def _forget_topic(self, active: _Active, name: str) -> None:
        active.context.remove_topic(name)
        for handle in active.topic_watches.pop(name, []):
            handle.cancel()
        active.reassignments.forget_topic(name)

    async def _on_topic_modified(self, active: _Active, name: str) -> None:
        """Kafka's processPartitionModifications: partitions added by CreatePartitions."""
        known = active.context.topics.get(name)
        topic = await self._read_topic(name)
        if known is None or topic is None or topic.zk_version == known.zk_version:
            return
        added = topic.partitions.keys() - known.partitions.keys()
        known.partitions.update({p: topic.partitions[p] for p in added})
        known.zk_version = topic.zk_version
        await active.states.initialize([TopicPartition(name, p) for p in sorted(added)])

    async def _on_topic_config(self, active: _Active, name: str) -> None:
        """A topic's config changed: if it now allows unclean election, its offline
        partitions may get a leader (Kafka's TopicUncleanLeaderElectionEnable)."""
        topic = active.context.topics.get(name)
        if topic is not None:
            replicas = {TopicPartition(name, p): a.replicas for p, a in topic.partitions.items()}
            await active.states.elect_offline(replicas, False)

    async def _on_deletions(self, active: _Active) -> None:
        """Delete requested topics: their nodes go in one transaction, and every broker
        deletes its replicas when it sees the topic gone (a broker that is down deletes
        them as strays when it starts)."""
        for name in await self._store.get_children(zk.DELETE_TOPICS_PATH):
            if not self._config.delete_topic_enable or name not in active.context.topics:
                await active.store.delete_request(zk.delete_topic_path(name))
                continue
            await active.store.delete_topic(name)
            self._forget_topic(active, name)
            log_event(_log, logging.INFO, "topic_deleted", topic=name)

    # -- preferred leaders -------------------------------------------------------------

    async def _check_leader_balance(self, active: _Active) -> None:
        context = active.context
        deleting = set(await self._store.get_children(zk.DELETE_TOPICS_PATH))
        replicas = {
            tp: a.replicas for tp, a in context.all_partitions() if tp.topic not in deleting
        }
        states = await active.store.read_states(replicas)
        chosen = partitions_to_rebalance(
            replicas,
            states,
            context.live_broker_ids,
            self._config.leader_imbalance_per_broker_percentage,
        )
        if chosen:
            log_event(_log, logging.INFO, "auto_leader_rebalance", partitions=len(chosen))
            await active.states.elect_preferred(chosen)


def _not_controller() -> NotControllerError:
    return NotControllerError("This is not the correct controller for this cluster.")


def _ids(brokers: Collection[int]) -> str:
    return ",".join(map(str, sorted(brokers)))
