"""How this broker builds the replica fetcher for a source broker (Kafka's
``ReplicaFetcherManager.createFetcherThread``): a `ReplicaFetcher` over a
`RemoteLeaderEndPoint` whose connection goes to the leader's inter-broker listener, as
its registration names it, with the replica.fetch.* settings."""

from __future__ import annotations

from collections.abc import Callable

from tiercel.config.broker_config import BrokerConfig
from tiercel.config.ssl_factory import outgoing_context
from tiercel.server.metadata.metadata_cache import MetadataCache
from tiercel.server.remote_log_reads import RemoteLogReads
from tiercel.server.replication.broker_client import BrokerClient
from tiercel.server.replication.failed_partitions import FailedPartitions
from tiercel.server.replication.remote_leader_end_point import FetcherConfig, RemoteLeaderEndPoint
from tiercel.server.replication.replica_fetcher import FollowerPartitions, ReplicaFetcher
from tiercel.server.replication.replica_fetcher_manager import FetcherFactory


def replica_fetcher_factory(
    config: BrokerConfig,
    node_id: int,
    cache: MetadataCache,
    partitions: FollowerPartitions,
    remote_log_manager: Callable[[], RemoteLogReads | None] = lambda: None,
) -> FetcherFactory:
    def make_fetcher(leader_id: int, failed_partitions: FailedPartitions) -> ReplicaFetcher:
        client = BrokerClient(
            leader_id,
            lambda: cache.broker_endpoint(leader_id, config.inter_broker_listener_name),
            f"tiercel-replica-fetcher-{node_id}",
            config.replica_socket_timeout_ms / 1000,
            config.replica_socket_receive_buffer_bytes,
            outgoing_context(config, config.inter_broker_listener_name),
            config.inter_broker_sasl_login(),
        )
        leader = RemoteLeaderEndPoint(
            client,
            FetcherConfig(
                replica_id=node_id,
                max_wait_ms=config.replica_fetch_wait_max_ms,
                min_bytes=config.replica_fetch_min_bytes,
                response_max_bytes=config.replica_fetch_response_max_bytes,
            ),
        )
        return ReplicaFetcher(
            leader,
            partitions,
            config.replica_fetch_max_bytes,
            config.replica_fetch_backoff_ms,
            remote_log_manager,
            failed_partitions,
        )

    return make_fetcher
