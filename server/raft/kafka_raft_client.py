"""KafkaRaftClient: Kafka's Raft (KIP-595) for the metadata partition, with PreVote
(KIP-996) and snapshots (KIP-630).

Leader election is Raft's, with a PreVote round before a voter bumps the epoch;
replication is driven by the followers' Fetch requests, with Kafka's log reconciliation
(a diverging epoch in the answer, truncation to it) instead of Raft's AppendEntries.
Voters elect; observers (brokers, and any node not in ``controller.quorum.voters``) only
fetch. The RPCs are Vote, BeginQuorumEpoch (a new leader announces itself),
EndQuorumEpoch (a leader resigns gracefully), Fetch (replication; the leader's high
watermark piggybacks), FetchSnapshot (a follower below the log start downloads the
leader's snapshot) and DescribeQuorum.

Like Kafka's client, all state changes in one sequential `poll`: it polls the current
state (sends what the state needs, times out elections and fetches), then handles one
inbound request or response. The RPC logic lives beside this module, one module per
family (`raft_vote`, `raft_quorum_epoch`, `raft_fetch`, `raft_fetch_snapshot`,
`raft_describe_quorum`, `raft_poll`), on this class's state. Event-loop only: `poll`
runs in one task (`KafkaRaftClientDriver`), durable steps (quorum-state writes, log
flushes, snapshot freezes) await the executor, and the public methods are called on
the loop between polls.
"""

from __future__ import annotations

import logging
import random
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar

from tiercel.protocol.errors import ErrorCode, NotLeaderOrFollowerError
from tiercel.server.raft import (
    raft_describe_quorum,
    raft_fetch,
    raft_fetch_snapshot,
    raft_poll,
    raft_quorum_epoch,
    raft_vote,
)
from tiercel.server.raft.batch import Batch
from tiercel.server.raft.batch_accumulator import BatchAccumulator
from tiercel.server.raft.endpoints import Endpoints, Node
from tiercel.server.raft.errors import BrokerNotAvailableError, NotLeaderError
from tiercel.server.raft.kraft_control_record_state_machine import (
    KRaftControlRecordStateMachine,
)
from tiercel.server.raft.leader_and_epoch import UNKNOWN_LEADER_AND_EPOCH, LeaderAndEpoch
from tiercel.server.raft.leader_state import LeaderState
from tiercel.server.raft.metadata_log_config import MAX_BATCH_SIZE_BYTES
from tiercel.server.raft.network_channel import NetworkChannel
from tiercel.server.raft.nominee_state import NomineeState
from tiercel.server.raft.offset_and_epoch import OffsetAndEpoch
from tiercel.server.raft.prospective_state import ProspectiveState
from tiercel.server.raft.quorum_config import QuorumConfig
from tiercel.server.raft.quorum_state import QuorumState
from tiercel.server.raft.quorum_state_store import QuorumStateStore
from tiercel.server.raft.raft_client_listener import Listener
from tiercel.server.raft.raft_listeners import RaftListeners
from tiercel.server.raft.raft_message import (
    Completion,
    InboundRequest,
    InboundResponse,
    OutboundRequest,
    RaftMessage,
    RaftMessageQueue,
    api_key_of,
)
from tiercel.server.raft.raft_util import error_response
from tiercel.server.raft.raw_snapshot import NotifyingRawSnapshotWriter
from tiercel.server.raft.record_serde import RecordSerde
from tiercel.server.raft.records_snapshot import (
    RecordsSnapshotWriter,
)
from tiercel.server.raft.replica_key import ReplicaKey
from tiercel.server.raft.replicated_log import ReplicatedLog
from tiercel.server.raft.request_manager import RequestManager
from tiercel.server.raft.threshold_purgatory import ThresholdPurgatory
from tiercel.server.raft.timer import Time, Timer
from tiercel.server.raft.voter_set import VoterSet

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["KafkaRaftClient"]

T = TypeVar("T")
_log: Final = logging.getLogger("tiercel.raft")

MAX_FETCH_WAIT_MS: Final = 500
MAX_NUMBER_OF_BATCHES: Final = 10
SNAPSHOT_CLEANING_INTERVAL_MS: Final = 60_000


class GracefulShutdown:
    """A shutdown in progress (Kafka's KafkaRaftClient.GracefulShutdown): a leader
    resigns and waits for a successor, within ``timeout_ms``."""

    def __init__(self, time: Time, timeout_ms: int) -> None:
        self.timer = Timer(time, timeout_ms)
        self.completion: Completion[None] = Completion()

    def remaining_time_ms(self, now: int) -> int:
        self.timer.update(now)
        return self.timer.remaining_ms


class KafkaRaftClient(Generic[T]):
    """Invariants: at most one Fetch in flight; a vote is durable before it is granted
    and a fetched batch before the next Fetch says it was received; listeners see
    committed records only, in order, once per load."""

    def __init__(
        self,
        node_id: int | None,
        node_directory_id: uuid.UUID,
        serde: RecordSerde[T],
        channel: NetworkChannel,
        message_queue: RaftMessageQueue,
        log: ReplicatedLog,
        time: Time,
        config: QuorumConfig,
        cluster_id: str,
        local_listeners: Endpoints,
        rng: random.Random | None = None,
        fetch_max_wait_ms: int = MAX_FETCH_WAIT_MS,
        followers_always_flush: bool = False,
    ) -> None:
        if node_directory_id.int == 0:
            raise ValueError("The node directory id must be set and not be the zero uuid")
        self.node_id = node_id
        self.node_directory_id = node_directory_id
        self.serde = serde
        self.channel = channel
        self.message_queue = message_queue
        self.log = log
        self.time = time
        self.config = config
        self.cluster_id = cluster_id
        self.local_listeners = local_listeners
        self.random = rng or random.Random()
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.followers_always_flush = followers_always_flush
        self.fetch_purgatory = ThresholdPurgatory()
        self.append_purgatory = ThresholdPurgatory()
        self.shutdown_state: GracefulShutdown | None = None
        self._snapshot_cleaning_timer = Timer(time, SNAPSHOT_CLEANING_INTERVAL_MS)
        self.listeners = RaftListeners(log, serde, message_queue.wakeup)
        # The static voters of controller.quorum.voters, or none: then the voter set is
        # the bootstrap checkpoint's, a snapshot's or the log's (KIP-853).
        static_voters = (
            VoterSet.from_addresses(channel.listener_name, config.voters)
            if config.voters
            else VoterSet({})
        )
        self.partition_state = KRaftControlRecordStateMachine(static_voters, log)
        self.request_manager = RequestManager(
            self._bootstrap_nodes(), config.retry_backoff_ms, config.request_timeout_ms, self.random
        )
        self._quorum: QuorumState | None = None
        self._closed = False

    def _bootstrap_nodes(self) -> list[Node]:
        """Bootstrap servers get the ids -2, -3, ... (their node ids are unknown); without
        them the static voters are where a fetch goes before a leader is known."""
        if self.config.bootstrap_servers:
            return [
                Node(-2 - i, address.host, address.port)
                for i, address in enumerate(self.config.bootstrap_servers)
            ]
        return [Node(v, a.host, a.port) for v, a in sorted(self.config.voters.items())]

    @property
    def voters(self) -> VoterSet:
        """The latest voter set (Kafka's partitionState.lastVoterSet)."""
        return self.partition_state.last_voter_set()

    @property
    def kraft_version(self) -> int:
        return self.partition_state.last_kraft_version()

    async def initialize(self, store: QuorumStateStore) -> None:
        """Restore the election state and start in it (Kafka's KafkaRaftClient.initialize);
        a sole voter elects itself at once."""
        # The voters come from the whole snapshot and log before any state is chosen.
        self.partition_state.update_state()
        _log.info("starting voters are %s", self.voters)
        self._quorum = QuorumState(
            self.node_id,
            self.node_directory_id,
            self.partition_state.last_voter_set,
            self.partition_state.last_kraft_version,
            self.local_listeners,
            self.config.election_timeout_ms,
            self.config.fetch_timeout_ms,
            store,
            self.time,
            self.random,
        )
        await self._quorum.initialize(self.end_offset())
        now = self.time.milliseconds()
        quorum = self._quorum
        if quorum.is_leader:
            raise RuntimeError("Voter cannot initialize as a Leader")
        if quorum.is_candidate:
            await self.on_become_candidate(now)
        elif quorum.is_follower:
            self.on_become_follower()
        if quorum.is_only_voter and not quorum.is_nominee:
            await self.transition_to_prospective(now)

    @property
    def quorum(self) -> QuorumState:
        if self._quorum is None:
            raise RuntimeError("Replica needs to be initialized")
        return self._quorum

    @property
    def is_initialized(self) -> bool:
        return self._quorum is not None

    # -- the public API (Kafka's RaftClient) ----------------------------------------------

    def register(self, listener: Listener[T]) -> None:
        """From the next poll on, ``listener`` gets the committed data (Kafka's register)."""
        self.listeners.register(listener)

    def unregister(self, listener: Listener[T]) -> None:
        self.listeners.unregister(listener)

    @property
    def leader_and_epoch(self) -> LeaderAndEpoch:
        return self.quorum.leader_and_epoch if self.is_initialized else UNKNOWN_LEADER_AND_EPOCH

    @property
    def high_watermark(self) -> int | None:
        if not self.is_initialized:
            return None
        high_watermark = self.quorum.high_watermark
        return None if high_watermark is None else high_watermark.message_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.end_offset.message_offset

    def latest_snapshot_id(self) -> OffsetAndEpoch | None:
        return self.log.latest_snapshot_id()

    def prepare_append(self, epoch: int, records: Sequence[T]) -> int:
        """Stage ``records`` as one batch for the leader of ``epoch``; the offset of the
        last one. Nothing is written before `schedule_prepared_append` (Kafka 4.0's
        prepareAppend). NotLeaderError unless this replica leads ``epoch``;
        RecordBatchTooLargeError if they exceed a batch."""
        accumulator = self._leader_accumulator("Append")
        first_append = accumulator.is_empty
        offset = accumulator.append(epoch, records, delay_drain=True)
        if first_append or accumulator.needs_drain(self.time.milliseconds()):
            self.message_queue.wakeup()
        return offset

    def schedule_prepared_append(self) -> None:
        """Let the prepared batches go to the log (Kafka's schedulePreparedAppend)."""
        accumulator = self._leader_accumulator("Flush")
        accumulator.allow_drain()
        if accumulator.needs_drain(self.time.milliseconds()):
            self.message_queue.wakeup()

    def schedule_atomic_append(self, epoch: int, records: Sequence[T]) -> int:
        """Append ``records`` as one batch: all of them commit or none (Kafka 3.x's
        scheduleAtomicAppend; in 4.0, prepareAppend then schedulePreparedAppend)."""
        offset = self.prepare_append(epoch, records)
        self.schedule_prepared_append()
        return offset

    def _leader_accumulator(self, operation: str) -> BatchAccumulator[T]:
        state: LeaderState[T] | None = (
            self.quorum.maybe_leader_state() if self.is_initialized else None
        )
        if state is None:
            raise NotLeaderError(
                f"{operation} failed because the replica is not the current leader"
            )
        accumulator: BatchAccumulator[T] = state.accumulator
        return accumulator

    def resign(self, epoch: int) -> None:
        """Give up the leadership of ``epoch`` (ignored if it is already over): the
        leader resigns at its next poll and tells the voters with EndQuorumEpoch."""
        if epoch < 0:
            raise ValueError(f"Attempt to resign from an invalid negative epoch {epoch}")
        current = self.leader_and_epoch
        if epoch > current.epoch:
            raise ValueError(
                f"Attempt to resign from epoch {epoch} which is larger than the current "
                f"epoch {current.epoch}"
            )
        if epoch < current.epoch:
            return
        if self.node_id is None or not current.is_leader(self.node_id):
            raise ValueError(f"Cannot resign from epoch {epoch} since we are not the leader")
        state: LeaderState[T] | None = self.quorum.maybe_leader_state()
        if state is not None and state.epoch == epoch:
            _log.info("resigning from epoch %d on request", epoch)
            state.resign_requested = True
            self.message_queue.wakeup()

    def create_snapshot(
        self, snapshot_id: OffsetAndEpoch, last_contained_log_time: int
    ) -> RecordsSnapshotWriter[T] | None:
        """A writer for a snapshot of the committed records below ``snapshot_id.offset``
        (the last of them in ``snapshot_id.epoch``); None if it exists already.
        ValueError if the id is past the high watermark or not a batch boundary."""
        raw = self.log.create_new_snapshot(snapshot_id)
        if raw is None:
            return None
        # The snapshot carries the kraft.version and voter set at its last offset; once
        # it is frozen, the older history entries are no longer needed (Kafka's
        # KafkaRaftClient.createSnapshot).
        self.partition_state.update_state()
        last_contained_log_offset = snapshot_id.offset - 1
        return RecordsSnapshotWriter(
            NotifyingRawSnapshotWriter(
                raw, lambda frozen: self.partition_state.truncate_old_entries(frozen.offset)
            ),
            last_contained_log_time,
            MAX_BATCH_SIZE_BYTES,
            self.time,
            self.serde,
            self.partition_state.kraft_version_at_offset(last_contained_log_offset),
            self.partition_state.voter_set_at_offset(last_contained_log_offset),
        )

    def shutdown(self, timeout_ms: int) -> Completion[None]:
        """Begin a graceful shutdown: a leader resigns and waits, up to ``timeout_ms``,
        until another voter leads; listeners are told to stop appending."""
        _log.info("beginning graceful shutdown of the raft client")
        self.shutdown_state = GracefulShutdown(self.time, timeout_ms)
        self.listeners.begin_shutdown()
        self.message_queue.wakeup()
        return self.shutdown_state.completion

    @property
    def is_running(self) -> bool:
        return self.shutdown_state is None or not self.shutdown_state.completion.done

    def handle(self, request: InboundRequest) -> None:
        """An inbound request; its completion gets the response (Kafka's handle). A
        closed client answers BROKER_NOT_AVAILABLE at once."""
        if self._closed:
            _answer_unavailable(request)
        else:
            self.message_queue.add(request)

    async def close(self) -> None:
        """Once polling has stopped: answer every request still waiting (parked fetches,
        queued requests) so that no peer's connection hangs on this replica, and flush the
        log (Kafka's KafkaRaftClient.close)."""
        self._closed = True
        self.fetch_purgatory.complete_all_exceptionally(
            BrokerNotAvailableError("The raft client is closed")
        )
        while not self.message_queue.is_empty:
            message = await self.message_queue.poll(0)
            if isinstance(message, InboundRequest):
                _answer_unavailable(message)
        await self.log.flush(True)

    # -- polling -------------------------------------------------------------------------

    async def poll(self) -> None:
        """One round: poll the state, wait (bounded by every timer) for a message and
        handle it, then feed the listeners (Kafka's KafkaRaftClient.poll)."""
        if not self.is_initialized:
            raise RuntimeError("Replica needs to be initialized before polling")
        now = self.time.milliseconds()
        if self._maybe_complete_shutdown(now):
            return
        self.fetch_purgatory.expire(now)
        timeout = await raft_poll.poll_current_state(self, now)
        timeout = min(timeout, self._maybe_clean_snapshots(now))
        timeout = min(timeout, max(0, self.fetch_purgatory.next_deadline_ms - now))
        message = await self.message_queue.poll(timeout)
        now = self.time.milliseconds()
        if message is not None:
            await self._handle_inbound_message(message, now)
        self.fetch_purgatory.expire(now)
        self._poll_listeners()

    def _maybe_clean_snapshots(self, now: int) -> int:
        """Apply the metadata log's snapshot retention every minute (Kafka's
        RaftMetadataLogCleanerManager)."""
        timer = self._snapshot_cleaning_timer
        timer.update(now)
        if timer.is_expired:
            self.log.maybe_clean()
            timer.reset(SNAPSHOT_CLEANING_INTERVAL_MS)
        return timer.remaining_ms

    def _maybe_complete_shutdown(self, now: int) -> bool:
        shutdown = self.shutdown_state
        if shutdown is None or shutdown.completion.done:
            return shutdown is not None
        if shutdown.remaining_time_ms(now) == 0:
            _log.warning("graceful shutdown timed out after %d ms", shutdown.timer.timeout_ms)
            shutdown.completion.complete_exceptionally(
                TimeoutError("Timeout expired before graceful shutdown completed")
            )
            return True
        quorum = self.quorum
        if quorum.is_observer or quorum.is_only_voter or quorum.has_remote_leader:
            _log.info("graceful shutdown completed")
            shutdown.completion.complete(None)
            return True
        return False

    async def _handle_inbound_message(self, message: RaftMessage, now: int) -> None:
        if isinstance(message, InboundRequest):
            await self._handle_request(message, now)
        elif self.request_manager.is_response_expected(message.source, message.correlation_id):
            await self._handle_response(message, now)
        else:
            _log.debug("ignoring a response no longer needed: %s", message)

    async def _handle_request(self, request: InboundRequest, now: int) -> None:
        api_key = api_key_of(request.data)
        handlers = {
            raft_fetch.FETCH: raft_fetch.handle_fetch_request,
            raft_vote.VOTE: raft_vote.handle_vote_request,
            raft_quorum_epoch.BEGIN_QUORUM_EPOCH: (
                raft_quorum_epoch.handle_begin_quorum_epoch_request
            ),
            raft_quorum_epoch.END_QUORUM_EPOCH: raft_quorum_epoch.handle_end_quorum_epoch_request,
            raft_describe_quorum.DESCRIBE_QUORUM: (
                raft_describe_quorum.handle_describe_quorum_request
            ),
            raft_fetch_snapshot.FETCH_SNAPSHOT: (raft_fetch_snapshot.handle_fetch_snapshot_request),
        }
        handler = handlers.get(api_key)
        if handler is None:
            raise ValueError(f"Unexpected request type {api_key}")
        try:
            response = await handler(self, request, now)
        except Exception as e:
            _log.error("failed to handle %s: %r", request, e, exc_info=e)
            response = error_response(api_key, ErrorCode.unknown_server_error)
        if response is not None:  # a parked Fetch answers later
            request.completion.complete(response)

    async def _handle_response(self, response: InboundResponse, now: int) -> None:
        api_key = api_key_of(response.data)
        handlers = {
            raft_fetch.FETCH: raft_fetch.handle_fetch_response,
            raft_vote.VOTE: raft_vote.handle_vote_response,
            raft_quorum_epoch.BEGIN_QUORUM_EPOCH: (
                raft_quorum_epoch.handle_begin_quorum_epoch_response
            ),
            raft_quorum_epoch.END_QUORUM_EPOCH: (
                raft_quorum_epoch.handle_end_quorum_epoch_response
            ),
            raft_fetch_snapshot.FETCH_SNAPSHOT: (
                raft_fetch_snapshot.handle_fetch_snapshot_response
            ),
        }
        handler = handlers.get(api_key)
        if handler is None:
            raise ValueError(f"Received unexpected response type: {api_key}")
        success = await handler(self, response, now)
        self.request_manager.on_response_result(
            response.source, response.correlation_id, success, now
        )

    # -- sending -------------------------------------------------------------------------

    def maybe_send_request(self, now: int, destination: Node, build: Callable[[], Any]) -> int:
        """Send ``build()`` to ``destination`` unless a request is in flight there or it
        backs off; how long until it is worth trying again (Kafka's maybeSendRequest)."""
        manager = self.request_manager
        if manager.is_backing_off(destination, now):
            return manager.remaining_backoff_ms(destination, now)
        if manager.is_ready(destination, now):
            correlation_id = self.channel.new_correlation_id()
            data = build()
            request = OutboundRequest(correlation_id, data, destination, now)
            api_key = api_key_of(data)

            def completed(response: InboundResponse | None, error: BaseException | None) -> None:
                if response is None:
                    code = _error_code(error)
                    response = InboundResponse(
                        correlation_id, error_response(api_key, code), destination
                    )
                self.message_queue.add(response)

            request.completion.when_complete(completed)
            manager.on_request_sent(destination, correlation_id, now)
            self.channel.send(request)
        return manager.remaining_request_time_ms(destination, now)

    # -- transitions ---------------------------------------------------------------------

    def reset_connections(self) -> None:
        self.request_manager.reset_all()

    async def transition_to_prospective(self, now: int) -> None:
        self.quorum.transition_to_prospective()
        self.maybe_fire_leader_change()
        await self.on_become_prospective(now)

    async def on_become_prospective(self, now: int) -> None:
        state = self.quorum.prospective_state()
        if not await self.maybe_transition_forward(state, now):
            self.reset_connections()

    async def transition_to_candidate(self, now: int) -> None:
        await self.quorum.transition_to_candidate()
        self.maybe_fire_leader_change()
        await self.on_become_candidate(now)

    async def on_become_candidate(self, now: int) -> None:
        state = self.quorum.candidate_state()
        if not await self.maybe_transition_forward(state, now):
            self.reset_connections()

    async def maybe_transition_forward(self, state: NomineeState, now: int) -> bool:
        """A majority granted: a prospective becomes candidate, a candidate leader."""
        if not state.epoch_election.is_vote_granted:
            return False
        if isinstance(state, ProspectiveState):
            await self.transition_to_candidate(now)
        else:
            await self.on_become_leader(now)
        return True

    async def maybe_handle_election_loss(self, state: NomineeState, now: int) -> None:
        """No majority possible any more: a candidate goes back to Prospective; a
        prospective follows the leader it knew, or waits unattached."""
        if not state.epoch_election.is_vote_rejected:
            return
        _log.info(
            "insufficient remaining votes (rejected by %s)",
            sorted(state.epoch_election.rejecting_voters),
        )
        if isinstance(state, ProspectiveState):
            await self.prospective_transition_after_election_loss(state, now)
        else:
            await self.transition_to_prospective(now)

    async def prospective_transition_after_election_loss(
        self, state: ProspectiveState, now: int
    ) -> None:
        if state.leader_id is not None and not state.leader_endpoints.is_empty:
            await self.transition_to_follower(
                state.epoch, state.leader_id, state.leader_endpoints, now
            )
        else:
            await self.transition_to_unattached(state.epoch, state.leader_id)

    async def on_become_leader(self, now: int) -> None:
        """Become leader at the log end; the epoch's LeaderChangeMessage goes first, since
        only an entry of this epoch can move the high watermark."""
        end_offset = self.log.end_offset.message_offset
        accumulator = BatchAccumulator(
            self.quorum.epoch,
            end_offset,
            self.config.append_linger_ms,
            MAX_BATCH_SIZE_BYTES,
            MAX_NUMBER_OF_BATCHES,
            self.time,
            self.serde,
        )
        state = await self.quorum.transition_to_leader(end_offset, accumulator)
        self.log.initialize_leader_epoch(state.epoch)
        voters_entry = self.partition_state.last_voter_set_entry()
        state.append_start_of_epoch_control_records(
            now, self.kraft_version, None if voters_entry is None else voters_entry.offset
        )
        self.reset_connections()

    async def transition_to_unattached(self, epoch: int, leader_id: int | None = None) -> None:
        was_leader = self.quorum.is_leader
        await self.quorum.transition_to_unattached(epoch, leader_id)
        if was_leader:
            self._fail_purgatories()
        self.maybe_fire_leader_change()
        self.reset_connections()

    def transition_to_resigned(self, preferred_successors: Sequence[ReplicaKey]) -> None:
        self.fetch_purgatory.complete_all_exceptionally(
            NotLeaderOrFollowerError("Not handling request since this node is resigning")
        )
        self.quorum.transition_to_resigned(preferred_successors)
        self.reset_connections()

    async def transition_to_follower(
        self, epoch: int, leader_id: int, endpoints: Endpoints, now: int
    ) -> None:
        await self.quorum.transition_to_follower(epoch, leader_id, endpoints)
        self.maybe_fire_leader_change()
        self.on_become_follower()

    def on_become_follower(self) -> None:
        self.reset_connections()
        self._fail_purgatories()

    def _fail_purgatories(self) -> None:
        """Parked fetches go back to be sent to the new leader; appends of a past
        leadership will never commit here."""
        self.fetch_purgatory.complete_all_exceptionally(
            NotLeaderOrFollowerError(
                "Cannot process the fetch request because the node is no longer the leader."
            )
        )
        self.append_purgatory.complete_all_exceptionally(
            NotLeaderOrFollowerError(
                "Failed to receive sufficient acknowledgments for this append before leader change."
            )
        )

    async def maybe_transition(
        self, leader_id: int | None, epoch: int, endpoints: Endpoints, now: int
    ) -> None:
        """Follow what a request or response says of the current leader and epoch
        (Kafka's maybeTransition); a leader whose endpoints are unknown leaves the replica
        unattached in its epoch."""
        quorum = self.quorum
        if not self._has_consistent_leader(epoch, leader_id):
            raise RuntimeError(
                f"Received request or response with leader {leader_id} and epoch {epoch} which "
                f"is inconsistent with current leader {quorum.leader_id} and epoch {quorum.epoch}"
            )
        if epoch > quorum.epoch:
            if leader_id is not None and not endpoints.is_empty:
                await self.transition_to_follower(epoch, leader_id, endpoints, now)
            else:
                await self.transition_to_unattached(epoch, leader_id)
        elif (
            leader_id is not None
            and not endpoints.is_empty
            and (not quorum.has_leader or len(endpoints) > len(quorum.leader_endpoints))
        ):
            await self.transition_to_follower(epoch, leader_id, endpoints, now)

    def _has_consistent_leader(self, epoch: int, leader_id: int | None) -> bool:
        quorum = self.quorum
        if leader_id is not None and leader_id == quorum.local_id_or_sentinel:
            return quorum.is_leader
        return (
            epoch != quorum.epoch
            or leader_id is None
            or quorum.leader_id is None
            or leader_id == quorum.leader_id
        )

    async def maybe_handle_common_response(
        self,
        error: ErrorCode,
        leader_id: int | None,
        epoch: int,
        endpoints: Endpoints,
        now: int,
    ) -> bool | None:
        """Errors every response handles alike (Kafka's maybeHandleCommonResponse): None
        when the RPC's own handler goes on, else whether the response counts as success."""
        quorum = self.quorum
        if endpoints.is_empty and leader_id is not None:
            endpoints = self.voters.listeners(leader_id)
        if epoch < quorum.epoch or error == ErrorCode.unknown_leader_epoch:
            return True
        if (
            epoch > quorum.epoch
            or error == ErrorCode.fenced_leader_epoch
            or error == ErrorCode.not_leader_or_follower
        ):
            await self.maybe_transition(leader_id, epoch, endpoints, now)
            return True
        if leader_id is not None and not quorum.has_leader and not endpoints.is_empty:
            # Found the leader of this epoch: follow it, and take the answer's data too.
            await self.transition_to_follower(epoch, leader_id, endpoints, now)
            return None if error == ErrorCode.none else True
        if error == ErrorCode.broker_not_available:
            return False
        if error == ErrorCode.invalid_voter_key:
            return True
        if error == ErrorCode.invalid_request:
            raise RuntimeError("Received unexpected invalid request error")
        return None

    def leader_endpoints_from(
        self, leader_id: int | None, node_endpoints: Sequence[Any]
    ) -> Endpoints:
        """The leader's address from a response's NodeEndpoints, else the voter set's."""
        if leader_id is None:
            return Endpoints()
        endpoints = Endpoints.from_node_endpoints(
            self.channel.listener_name, leader_id, node_endpoints
        )
        return endpoints if not endpoints.is_empty else self.voters.listeners(leader_id)

    def handle_top_level_error(self, error: ErrorCode, response: InboundResponse) -> bool:
        """A response's top-level error: retry after a backoff (Kafka's
        handleTopLevelError; a cluster authorization failure is fatal there)."""
        if error == ErrorCode.cluster_authorization_failed:
            raise RuntimeError(f"Received cluster authorization error in response {response}")
        if error == ErrorCode.broker_not_available:
            return False
        return self.handle_unexpected_error(error, response)

    def handle_unexpected_error(self, error: ErrorCode, response: InboundResponse) -> bool:
        _log.error("unexpected error %s in response %s", error.name, response)
        return False

    # -- validation ----------------------------------------------------------------------

    def has_valid_cluster_id(self, request_cluster_id: str | None) -> bool:
        """Not enforced when the request has none."""
        return request_cluster_id is None or request_cluster_id == self.cluster_id

    def validate_voter_only_request(self, remote_node_id: int, request_epoch: int) -> ErrorCode:
        """Vote, BeginQuorumEpoch, EndQuorumEpoch."""
        if request_epoch < self.quorum.epoch:
            return ErrorCode.fenced_leader_epoch
        if remote_node_id < 0:
            return ErrorCode.invalid_request
        return ErrorCode.none

    def validate_leader_only_request(self, request_epoch: int) -> ErrorCode:
        """Fetch, FetchSnapshot: only the leader of the request's epoch answers."""
        quorum = self.quorum
        if request_epoch < quorum.epoch:
            return ErrorCode.fenced_leader_epoch
        if request_epoch > quorum.epoch:
            return ErrorCode.unknown_leader_epoch
        if not quorum.is_leader:
            # Observers find the result of an election by fetching from voters.
            return ErrorCode.not_leader_or_follower
        if self.shutdown_state is not None:
            return ErrorCode.broker_not_available
        return ErrorCode.none

    def is_valid_voter_key(self, voter_key: ReplicaKey | None) -> bool:
        """Whether a Vote or BeginQuorumEpoch was meant for this replica."""
        if voter_key is None:
            return True
        if voter_key.id != self.node_id:
            return False
        return voter_key.directory_id is None or voter_key.directory_id == self.node_directory_id

    def end_offset(self) -> OffsetAndEpoch:
        return OffsetAndEpoch(self.log.end_offset.message_offset, self.log.last_fetched_epoch)

    # -- high watermark and listeners ----------------------------------------------------

    def update_follower_high_watermark(self, high_watermark: int | None) -> None:
        """Take the leader's HW, capped at this log's end."""
        if high_watermark is None:
            return
        state = self.quorum.follower_state()
        new_high_watermark = min(self.log.end_offset.message_offset, high_watermark)
        if state.update_high_watermark(new_high_watermark):
            self.log.update_high_watermark(state.high_watermark or self.log.high_watermark)
            self.update_listeners_progress(new_high_watermark)

    def update_leader_end_offset(self, state: LeaderState[T], now: int) -> None:
        end_offset = self.log.end_offset
        if state.update_local_state(end_offset):
            self.on_update_leader_high_watermark(state, now)
        self.fetch_purgatory.maybe_complete(end_offset.message_offset, now)

    def on_update_leader_high_watermark(self, state: LeaderState[T], now: int) -> None:
        high_watermark = state.high_watermark
        if high_watermark is None:
            return
        self.log.update_high_watermark(high_watermark)
        # The leader's own appends go to listeners from memory first; what they have
        # not seen yet is read back from the log.
        self.append_purgatory.maybe_complete(high_watermark.message_offset, now)
        self.update_listeners_progress(high_watermark.message_offset)
        # A fetch parks only when its replica knows the leader's high watermark (KIP-1166:
        # one behind is answered at once), so an advance leaves every parked one behind.
        self.fetch_purgatory.complete_all(now)

    def update_listeners_progress(self, high_watermark: int) -> None:
        self.listeners.update_progress(high_watermark)

    def maybe_fire_handle_commit(self, batch: Batch[T]) -> None:
        self.listeners.fire_handle_commit(batch)

    def maybe_fire_leader_change(self, leader_state: LeaderState[T] | None = None) -> None:
        """Tell the listeners of the current leader; of this replica's own leadership
        (``leader_state`` given) once they have reached its epoch's start."""
        start = None if leader_state is None else leader_state.epoch_start_offset
        self.listeners.fire_leader_change(self.quorum.leader_and_epoch, start)

    def _poll_listeners(self) -> None:
        self.listeners.apply_registrations()
        high_watermark = self.quorum.high_watermark
        if high_watermark is not None:
            self.update_listeners_progress(high_watermark.message_offset)
        leader_state: LeaderState[T] | None = self.quorum.maybe_leader_state()
        if leader_state is not None:
            self.maybe_fire_leader_change(leader_state)
        elif not self.quorum.is_resigned:
            # A resigned replica is still the epoch's leader but can write nothing: not
            # worth telling the listeners.
            self.maybe_fire_leader_change()


def _error_code(error: BaseException | None) -> ErrorCode:
    """Kafka's Errors.forException for the failures a request can end with."""
    code = getattr(error, "error_code", None)
    if isinstance(code, ErrorCode):
        return code
    if isinstance(error, TimeoutError):
        return ErrorCode.request_timed_out
    return (
        ErrorCode.broker_not_available
        if isinstance(error, OSError)
        else ErrorCode.unknown_server_error
    )


def _answer_unavailable(request: InboundRequest) -> None:
    request.completion.complete(
        error_response(api_key_of(request.data), ErrorCode.broker_not_available)
    )
