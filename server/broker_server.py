"""BrokerServer: builds the broker's components, starts them in order, stops them cleanly.

Start-up of a single node: log dirs and the embedded metadata store first (which lives
in the first log dir), the cluster id, then the logs (recovered if the last stop was not
clean), the listeners (bound early so that port 0 resolves before the broker registers
its endpoints), the broker registration, the controller election, and finally the
metadata listener, which gives this broker its partitions. Requests that arrive before
that wait. A KRaft node's broker learns its metadata from the quorum instead
(`KRaftBrokerMetadata`).

Shutdown (SIGTERM/SIGINT): in a KRaft cluster, first a controlled shutdown (the
controller moves this broker's leaderships away while it still serves its followers,
through the heartbeats); then stop
accepting, answer waiting long polls and every request already received, close
connections, resign as controller, flush and close the logs, write the checkpoints and
the clean-shutdown marker.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
import socket
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final, Protocol

from tiercel.config.broker_config import BrokerConfig, Listener
from tiercel.config.log_config import LogConfig
from tiercel.config.logging_setup import log_event
from tiercel.config.ssl_factory import outgoing_context
from tiercel.server.add_partitions_to_txn_manager import AddPartitionsToTxnManager
from tiercel.server.admin_manager import AdminManager
from tiercel.server.assignments_manager import AssignmentsManager
from tiercel.server.authorizer.authorizer import load_authorizer
from tiercel.server.controller.controller import Controller
from tiercel.server.coordinator.group.group_config import GroupCoordinatorConfig
from tiercel.server.coordinator.group.group_coordinator import GroupCoordinator
from tiercel.server.coordinator.group.group_metadata_manager import GroupMetadataManager
from tiercel.server.coordinator.transaction.producer_id_manager import ProducerIdManager
from tiercel.server.coordinator.transaction.rpc_producer_id_manager import RpcProducerIdManager
from tiercel.server.coordinator.transaction.transaction_config import TransactionConfig
from tiercel.server.coordinator.transaction.transaction_coordinator import TransactionCoordinator
from tiercel.server.coordinator.transaction.transaction_marker_channel import (
    TransactionMarkerChannelManager,
)
from tiercel.server.coordinator.transaction.transaction_state_manager import (
    TransactionStateManager,
)
from tiercel.server.handlers.add_partitions_to_txn import verify_partitions
from tiercel.server.kafka_apis import KafkaApis
from tiercel.server.log_dir_failure_handler import LogDirFailureHandler, StoreLogDirEvents
from tiercel.server.metadata import zk_data as zk
from tiercel.server.metadata.acl_publisher import AclPublisher
from tiercel.server.metadata.local_store import LocalMetadataStore
from tiercel.server.metadata.metadata_cache import MetadataCache, TopicMetadata
from tiercel.server.metadata.metadata_listener import MetadataListener
from tiercel.server.metadata.store import (
    MetadataStore,
    NodeExistsError,
    NoNodeError,
)
from tiercel.server.network.connection import Buffer, Connection
from tiercel.server.network.credential_cache import CredentialCache
from tiercel.server.network.socket_server import SocketServer
from tiercel.server.remote_log_wiring import start_remote_log_manager
from tiercel.server.replica_manager import ReplicaManager
from tiercel.server.replication.alter_partition import ZkAlterPartitionManager
from tiercel.server.request_context import BrokerServices
from tiercel.storage.log_manager import LogManager
from tiercel.storage.meta_properties import MetaProperties
from tiercel.storage.scheduler import Scheduler

if TYPE_CHECKING:
    # A KRaft node's modules: imported by the node (KafkaRaftServer), never by a broker
    # without process.roles.
    from tiercel.server.kraft_broker_metadata import KRaftBrokerMetadata

_log: Final = logging.getLogger("tiercel.broker")


class BrokerServer:
    """``kraft``: this broker is the broker role of a KRaft node, which learns metadata
    from the quorum (`KRaftBrokerMetadata`) instead of a MetadataStore; the node gives
    it the cluster id and the scheduler it shares with the Raft client."""

    def __init__(
        self,
        config: BrokerConfig,
        kraft: KRaftBrokerMetadata | None = None,
        cluster_id: str | None = None,
        scheduler: Scheduler | None = None,
    ) -> None:
        self.config = config
        self._kraft = kraft
        self._kraft_cluster_id = cluster_id
        self._given_scheduler = scheduler
        self._ready = asyncio.Event()
        self._stopping = asyncio.Event()
        self._topic_overrides: dict[str, dict[str, str]] = {}
        self._apis: KafkaApis | None = None
        self._assignments_manager: AssignmentsManager | None = None
        # Loaded before the event loop runs: a bad authorizer setting (or one on a node
        # without process.roles) stops the start with a configuration error.
        self.authorizer = load_authorizer(config)

    def log_config_for(self, topic: str) -> LogConfig:
        return LogConfig.from_overrides(self.config, self._topic_overrides.get(topic, {}))

    async def run(self) -> None:
        await self.startup()
        await self._stopping.wait()
        await self.shutdown()

    def request_stop(self) -> None:
        self._stopping.set()

    async def startup(self) -> None:
        config = self.config
        kraft = self._kraft
        loop = asyncio.get_running_loop()
        self.scheduler = self._given_scheduler or Scheduler(
            loop, max(4, config.num_recovery_threads_per_data_dir)
        )
        for path in config.log_dirs:
            os.makedirs(path, exist_ok=True)
        store: MetadataStore | None = None
        if kraft is None:
            store = self.store = LocalMetadataStore(config.log_dirs[0])
            await store.start()
            await self._ensure_persistent_paths()
            cluster_id = await self._cluster_id()
            await self._load_topic_overrides()
        else:
            cluster_id = self._kraft_cluster_id
        self.log_manager = LogManager(config, self.scheduler, self.log_config_for)
        cluster_id = await self.log_manager.startup(
            cluster_id, None if kraft is None else kraft.meta_properties
        )
        self.cache = MetadataCache(config.node_id, cluster_id)
        self.replica_manager = ReplicaManager(
            config,
            config.node_id,
            self.log_manager,
            self.scheduler,
            self.log_config_for,
            self.cache,
            (
                ZkAlterPartitionManager(_present(store))
                if kraft is None
                else kraft.alter_partition_manager(self.cache)
            ),
        )
        self.replica_manager.startup()
        admin_manager = AdminManager(
            config, store, self.cache, None if kraft is None else kraft.topic_creator()
        )
        self.remote_log_wiring = await start_remote_log_manager(
            config, self.replica_manager, self.cache, admin_manager
        )
        group_config = GroupCoordinatorConfig.from_broker_config(config)
        self.group_coordinator = GroupCoordinator(
            group_config,
            GroupMetadataManager(group_config, self.replica_manager, self.cache, self.scheduler),
            self.scheduler,
        )
        # Before the metadata listener starts: leading a __consumer_offsets partition
        # loads its groups.
        self.replica_manager.leadership_listeners.append(
            self.group_coordinator.on_leadership_change
        )
        self.group_coordinator.startup()
        producer_id_manager: ProducerIdManager | RpcProducerIdManager = (
            ProducerIdManager(config.node_id, _present(store))
            if kraft is None
            else kraft.producer_id_manager()
        )
        self.transaction_coordinator = _transaction_coordinator(
            config, self.replica_manager, self.cache, self.scheduler, producer_id_manager
        )
        # Likewise: leading a __transaction_state partition loads its transactional ids.
        self.replica_manager.leadership_listeners.append(
            self.transaction_coordinator.on_leadership_change
        )
        self.transaction_coordinator.startup()
        # KIP-890 part 1: leaders verify a transaction's first write to a partition.
        txn_config = TransactionConfig.from_broker_config(config)
        self.replica_manager.add_partitions_to_txn_manager = AddPartitionsToTxnManager(
            config.node_id,
            self.cache,
            self.transaction_coordinator.partition_for,
            txn_config.inter_broker_listener_name,
            txn_config.request_timeout_ms,
            functools.partial(verify_partitions, self.cache, self.transaction_coordinator),
            outgoing_context(config, txn_config.inter_broker_listener_name),
            config.inter_broker_sasl_login(),
        )
        self.controller = None if store is None else Controller(config, store)
        self.credential_cache = CredentialCache()
        services = BrokerServices(
            config=config,
            node_id=config.node_id,
            cluster_id=cluster_id,
            metadata_cache=self.cache,
            replica_manager=self.replica_manager,
            log_manager=self.log_manager,
            admin_manager=admin_manager,
            scheduler=self.scheduler,
            group_coordinator=self.group_coordinator,
            producer_id_manager=producer_id_manager,
            transaction_coordinator=self.transaction_coordinator,
            controller=self.controller,
            forwarding_manager=None if kraft is None else kraft.forwarding_manager(),
            credential_cache=self.credential_cache,
            authorizer=self.authorizer,
        )
        self._apis = KafkaApis(services)
        self.socket_server = SocketServer(
            [e for e in config.listeners if e.name not in config.controller_listener_names],
            self._handle_frame,
            config.socket_request_max_bytes,
            config.queued_max_requests,
            config.connections_max_idle_ms,
            config.socket_send_buffer_bytes,
            config.socket_receive_buffer_bytes,
            config.ssl_configs,
            config.sasl_configs,
            config.sasl_server_max_receive_size,
            config.connection_failed_authentication_delay_ms,
            self.credential_cache,
        )
        await self.socket_server.start()
        if kraft is None:
            await self._start_store_metadata(_present(store))
        else:
            await self._start_kraft_metadata(kraft)
        self.replica_manager.delete_stray_logs()
        self._ready.set()
        log_event(
            _log,
            logging.INFO,
            "broker_started",
            node_id=config.node_id,
            cluster_id=cluster_id,
            listeners=",".join(str(e) for e in self._advertised_endpoints()),
        )

    async def _start_store_metadata(self, store: MetadataStore) -> None:
        """Register in the store, start the controller election, follow the store."""
        config = self.config
        await self._register_broker()
        self.log_dir_failure_handler = LogDirFailureHandler(
            config.node_id, self.log_manager, self.replica_manager, StoreLogDirEvents(store)
        )
        self.log_dir_failure_handler.startup()
        assert self.controller is not None
        await self.controller.startup()
        self.listener = MetadataListener(store, self.cache, self._on_topic)
        await self.listener.start()

    async def _start_kraft_metadata(self, kraft: KRaftBrokerMetadata) -> None:
        """Publish the metadata log's images here, then register with the controller
        and wait until caught up and unfenced (Kafka's BrokerServer.startup)."""
        # Replicas placed in log dirs the metadata does not name yet go to the
        # controller (KIP-858; Kafka's BrokerServer wires the AssignmentsManager in as
        # ReplicaManager's DirectoryEventHandler).
        assignments = self._assignments_manager = kraft.assignments_manager()
        self.replica_manager.directory_ids = kraft.log_dir_ids
        self.replica_manager.directory_event_handler = assignments.on_assignment
        if self.authorizer is not None:
            kraft.loader.install_publisher(AclPublisher(self.authorizer))
        kraft.start_loading(self.cache, self._on_topic, self.replica_manager, self.credential_cache)
        self.log_dir_failure_handler = LogDirFailureHandler(
            self.config.node_id, self.log_manager, self.replica_manager, kraft.log_dir_events()
        )
        self.log_dir_failure_handler.startup()
        await kraft.register_and_catch_up(self._advertised_endpoints())

    async def _handle_frame(
        self, connection: Connection, frame: bytes | memoryview
    ) -> Sequence[Buffer] | None:
        if not self._ready.is_set():
            await self._ready.wait()
        assert self._apis is not None
        return await self._apis.handle_frame(connection, frame)

    async def _on_topic(self, name: str, topic: TopicMetadata | None) -> None:
        if self.replica_manager.closed:
            # Shutting down: no fetcher may start, no log change behind the final flush.
            return
        if topic is None:
            self._topic_overrides.pop(name, None)
        else:
            self._topic_overrides[name] = dict(topic.config_overrides)
        await self.replica_manager.on_topic(name, topic)

    async def _ensure_persistent_paths(self) -> None:
        for path in zk.PERSISTENT_PATHS:
            with contextlib.suppress(NodeExistsError):
                await self.store.create(path, make_parents=True)

    async def _cluster_id(self) -> str | None:
        try:
            data, _ = await self.store.get(zk.CLUSTER_ID_PATH)
            return zk.decode_cluster_id(data)
        except NoNodeError:
            pass
        cluster_id = self.config.cluster_id or _cluster_id_from_log_dirs(self.config.log_dirs)
        if cluster_id is None:
            cluster_id = MetaProperties.generate_cluster_id()
        try:
            await self.store.create(zk.CLUSTER_ID_PATH, zk.encode_cluster_id(cluster_id))
        except NodeExistsError:
            data, _ = await self.store.get(zk.CLUSTER_ID_PATH)
            cluster_id = zk.decode_cluster_id(data)
        return cluster_id

    async def _load_topic_overrides(self) -> None:
        for topic in await self.store.get_children(zk.TOPIC_CONFIGS_PATH):
            try:
                data, _ = await self.store.get(zk.topic_config_path(topic))
            except NoNodeError:
                continue
            self._topic_overrides[topic] = zk.decode_topic_config(data)

    def _advertised_endpoints(self) -> list[Listener]:
        """Advertised listeners with port 0 resolved to the bound port and an empty
        host to this machine's name."""
        endpoints = []
        controller_listeners = self.config.controller_listener_names
        for listener in self.config.advertised_listeners:
            if listener.name in controller_listeners:
                continue  # served by the node's controller, not by this broker
            port = listener.port or self.socket_server.bound_ports.get(listener.name, 0)
            host = listener.host or socket.getfqdn()
            endpoints.append(Listener(listener.name, host, port))
        return endpoints

    async def _register_broker(self) -> None:
        """Create this broker's registration (ephemeral: the local store drops it with
        the session at the next start)."""
        node_id = self.config.node_id
        registration = zk.BrokerRegistration(node_id, tuple(self._advertised_endpoints()))
        await self.store.create(zk.broker_path(node_id), registration.encode(), ephemeral=True)

    async def shutdown(self) -> None:
        log_event(_log, logging.INFO, "broker_stopping", node_id=self.config.node_id)
        kraft = self._kraft
        if kraft is not None and self.config.controlled_shutdown_enable:
            await kraft.controlled_shutdown(self.config.broker_session_timeout_ms / 1000)
        await self.log_dir_failure_handler.shutdown()
        if self._assignments_manager is not None:
            await self._assignments_manager.close()
        self.replica_manager.shutdown()
        if self.replica_manager.add_partitions_to_txn_manager is not None:
            await self.replica_manager.add_partitions_to_txn_manager.shutdown()
        if self.remote_log_wiring is not None:
            await self.remote_log_wiring.close()
        await self.transaction_coordinator.shutdown()
        await self.group_coordinator.shutdown()
        self.cache.close()
        await self.socket_server.shutdown()
        if kraft is None:
            await self.listener.stop()
            assert self.controller is not None
            await self.controller.shutdown()
        else:
            await kraft.close()
        await self.log_manager.shutdown()
        if kraft is None:
            await self.store.close()
            self.scheduler.shutdown()
        log_event(_log, logging.INFO, "broker_stopped", node_id=self.config.node_id)


def _transaction_coordinator(
    config: BrokerConfig,
    replica_manager: ReplicaManager,
    cache: MetadataCache,
    scheduler: Scheduler,
    producer_id_manager: ProducerIdManager | RpcProducerIdManager,
) -> TransactionCoordinator:
    txn_config = TransactionConfig.from_broker_config(config)
    manager = TransactionStateManager(txn_config, replica_manager, cache, scheduler)
    markers = TransactionMarkerChannelManager(
        config.node_id,
        cache,
        scheduler,
        txn_config.inter_broker_listener_name,
        txn_config.request_timeout_ms,
        manager.append_transaction_to_log,
        outgoing_context(config, txn_config.inter_broker_listener_name),
        config.inter_broker_sasl_login(),
    )
    return TransactionCoordinator(
        manager, markers, producer_id_manager.generate_producer_id, scheduler
    )


def _present(store: MetadataStore | None) -> MetadataStore:
    """The store of a broker that is not a KRaft node's."""
    assert store is not None
    return store


def _cluster_id_from_log_dirs(log_dirs: list[str]) -> str | None:
    for path in log_dirs:
        meta = MetaProperties.read(path)
        if meta is not None:
            return meta.cluster_id
    return None


class _Stoppable(Protocol):
    def request_stop(self) -> None: ...


def install_signal_handlers(server: _Stoppable) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, server.request_stop)
