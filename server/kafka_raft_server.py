"""A KRaft node: what `tiercel broker` runs when ``process.roles`` is set (Kafka's
KafkaRaftServer with its SharedServer).

Start-up, in Kafka's order:
- the directories: every log dir and the metadata log dir must have been formatted
  (`tiercel storage format`) for this cluster and node (Kafka's
  KafkaRaftServer.initializeLogDirs, with its messages);
- with the controller role, the controller listeners are bound first (a port 0 listener
  learns its port);
- the Raft client on ``__cluster_metadata-0`` in metadata.log.dir, a voter when the node
  is one of controller.quorum.voters, an observer otherwise;
- the controller role's QuorumController, which writes the bootstrap metadata
  (``bootstrap.checkpoint``, read by the controller role alone) when it is the first
  to lead an empty log;
- the broker role's BrokerServer, which replicates the log as metadata, registers and
  waits to be unfenced.

Shutdown goes the other way: the broker (after its controlled shutdown), the
controller, then Raft, which hands over a leadership it holds before it stops.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from typing import Final

from tiercel.config.broker_config import BrokerConfig, Listener
from tiercel.config.logging_setup import log_event
from tiercel.config.ssl_factory import outgoing_context
from tiercel.protocol.metadata.metadata_record_serde import (
    ApiMessageAndVersion,
    MetadataRecordSerde,
)
from tiercel.server.broker_server import BrokerServer
from tiercel.server.controller_server import ControllerServer
from tiercel.server.kraft_broker_metadata import KRaftBrokerMetadata
from tiercel.server.metadata.bootstrap_directory import read_bootstrap_metadata
from tiercel.server.metadata.bootstrap_metadata import BootstrapMetadata
from tiercel.server.metadata.metadata_loader import MetadataLoader
from tiercel.server.raft.endpoints import Endpoints, HostPort
from tiercel.server.raft.kafka_metadata_log import METADATA_TOPIC_PARTITION
from tiercel.server.raft.kafka_raft_manager import KafkaRaftManager
from tiercel.server.raft.metadata_log_config import MAX_BATCH_SIZE_BYTES, MetadataLogConfig
from tiercel.server.raft.quorum_config import QuorumConfig
from tiercel.storage.meta_properties import MetaProperties
from tiercel.storage.meta_properties_ensemble import MetaPropertiesEnsemble, MetaPropertiesError
from tiercel.storage.scheduler import Scheduler

__all__ = ["KafkaRaftServer", "quorum_config"]

_log: Final = logging.getLogger("tiercel.kraft")
# How long a leader of the quorum may take to hand over its leadership at shutdown.
_RAFT_SHUTDOWN_TIMEOUT_MS: Final = 5000


def quorum_config(config: BrokerConfig) -> QuorumConfig:
    """controller.quorum.* as the Raft client takes them (Kafka's QuorumConfig)."""
    return QuorumConfig(
        voters={v.node_id: HostPort(v.host, v.port) for v in config.quorum_voters},
        bootstrap_servers=[HostPort(h, p) for h, p in config.quorum_bootstrap_servers],
        election_timeout_ms=config.controller_quorum_election_timeout_ms,
        election_backoff_max_ms=config.controller_quorum_election_backoff_max_ms,
        fetch_timeout_ms=config.controller_quorum_fetch_timeout_ms,
        request_timeout_ms=config.controller_quorum_request_timeout_ms,
        retry_backoff_ms=config.controller_quorum_retry_backoff_ms,
        append_linger_ms=config.controller_quorum_append_linger_ms,
    )


def metadata_log_config(config: BrokerConfig) -> MetadataLogConfig:
    """metadata.log.* and metadata.max.retention.* (Kafka's MetadataLogConfig)."""
    return MetadataLogConfig(
        log_segment_bytes=config.metadata_log_segment_bytes,
        log_segment_min_bytes=config.metadata_log_segment_min_bytes,
        log_segment_millis=config.metadata_log_segment_ms,
        retention_max_bytes=config.metadata_max_retention_bytes,
        retention_millis=config.metadata_max_retention_ms,
    )


def _advertised_controller_endpoint(
    config: BrokerConfig, listener: Listener, bound_port: int
) -> HostPort:
    """Where the other voters reach this controller listener: its advertised.listeners
    entry if there is one, else the listener, a wildcard or empty host named by this
    machine's name and port 0 by the bound port (Kafka's
    effectiveAdvertisedControllerListeners)."""
    advertised = next((a for a in config.advertised_listeners if a.name == listener.name), listener)
    host = advertised.host
    if host in ("", "0.0.0.0", "::"):
        host = socket.getfqdn()
    return HostPort(host, advertised.port or bound_port)


def initialize_log_dirs(config: BrokerConfig) -> dict[str, MetaProperties]:
    """Every directory's meta.properties, checked as Kafka's
    KafkaRaftServer.initializeLogDirs checks them; MetaPropertiesError says why not."""
    dirs = sorted({*config.log_dirs, config.metadata_log_dir})
    ensemble = MetaPropertiesEnsemble.load(dirs, config.metadata_log_dir)
    ensemble.verify(
        None, config.node_id, require_at_least_one_valid=True, require_metadata_log_dir=True
    )
    metadata_dir_name = str(METADATA_TOPIC_PARTITION)
    for log_dir in ensemble.log_dir_props:
        found = os.path.join(log_dir, metadata_dir_name)
        if log_dir != config.metadata_log_dir and os.path.exists(found):
            raise MetaPropertiesError(
                f"Found unexpected metadata location in data directory `{found}` (the "
                f"configured metadata directory is {config.metadata_log_dir})."
            )
    for log_dir in sorted(ensemble.empty_log_dirs):
        raise MetaPropertiesError(
            f"No `meta.properties` found in {log_dir} (have you run `tiercel storage "
            "format` to format the directory?)"
        )
    props = dict(ensemble.log_dir_props)
    for log_dir, meta in props.items():
        if meta.directory_id is None:
            raise MetaPropertiesError(
                f"{log_dir}/meta.properties has no directory.id: format it with "
                "`tiercel storage format`"
            )
    return props


class KafkaRaftServer:
    """Event-loop only."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self._stopping = asyncio.Event()
        self.controller_server: ControllerServer | None = None
        self.broker: BrokerServer | None = None
        self._raft: KafkaRaftManager[ApiMessageAndVersion] | None = None
        self._loader: MetadataLoader | None = None
        self._scheduler: Scheduler | None = None

    async def run(self) -> None:
        await self.startup()
        await self._stopping.wait()
        await self.shutdown()

    def request_stop(self) -> None:
        self._stopping.set()

    async def startup(self) -> None:
        config = self.config
        roles = config.process_roles
        props = await asyncio.to_thread(initialize_log_dirs, config)
        meta = props[config.metadata_log_dir]
        cluster_id = meta.cluster_id
        assert meta.directory_id is not None
        if config.metadata_log_segment_min_bytes != MAX_BATCH_SIZE_BYTES:
            # Kafka's KafkaMetadataLog.apply says so too.
            _log.error(
                "Overriding metadata.log.segment.min.bytes is only supported for testing. "
                "Setting this value too low may lead to an inability to write batches of "
                "metadata records."
            )
        loop = asyncio.get_running_loop()
        scheduler = self._scheduler = Scheduler(
            loop, max(4, config.num_recovery_threads_per_data_dir)
        )
        listener_name = config.controller_listener_names[0]
        endpoints = Endpoints()
        bootstrap: BootstrapMetadata | None = None
        if "controller" in roles:
            # The bootstrap metadata is the controller's alone (Kafka's KafkaRaftServer
            # hands it to the ControllerServer only): a broker-only node never reads
            # bootstrap.checkpoint, which it may lack.
            bootstrap = await asyncio.to_thread(read_bootstrap_metadata, config.metadata_log_dir)
            controller_server = self.controller_server = ControllerServer(config)
            ports = await controller_server.bind()
            endpoints = Endpoints.of(
                {
                    listener.name: _advertised_controller_endpoint(
                        config, listener, ports[listener.name]
                    )
                    for listener in controller_server.listeners
                }
            )
        raft = self._raft = KafkaRaftManager(
            config.node_id,
            meta.directory_id,
            cluster_id,
            config.metadata_log_dir,
            MetadataRecordSerde(),
            scheduler,
            listener_name,
            log_config=metadata_log_config(config),
            local_endpoints=endpoints,
            ssl_context=outgoing_context(config, listener_name),
        )
        await raft.start(quorum_config(config))
        if self.controller_server is not None:
            assert bootstrap is not None
            self.controller_server.start(cluster_id, raft.client, bootstrap.records)
        if "broker" in roles:
            loader = self._loader = MetadataLoader(
                config.node_id, lambda: raft.client.high_watermark
            )
            kraft = KRaftBrokerMetadata(
                config, cluster_id, raft.client, loader, {d: props[d] for d in config.log_dirs}
            )
            self.broker = BrokerServer(config, kraft, cluster_id, scheduler)
            await self.broker.startup()
        log_event(
            _log,
            logging.INFO,
            "kraft_node_started",
            node_id=config.node_id,
            cluster_id=cluster_id,
            roles=",".join(sorted(roles)),
        )

    async def shutdown(self) -> None:
        if self.broker is not None:
            await self.broker.shutdown()
        if self._raft is not None:
            # Raft first, while the controller listener still answers the quorum: a
            # leader hands its leadership over and hears its successor's
            # BeginQuorumEpoch (Kafka's ControllerServer.shutdown, ensureNotRaftLeader
            # before the socket server stops).
            await self._raft.shutdown(_RAFT_SHUTDOWN_TIMEOUT_MS)
        if self.controller_server is not None:
            await self.controller_server.shutdown()
        if self._loader is not None:
            await self._loader.close()
        if self._scheduler is not None:
            self._scheduler.shutdown()
        log_event(_log, logging.INFO, "kraft_node_stopped", node_id=self.config.node_id)
