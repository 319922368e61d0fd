"""The controller's side of a failed log dir: its replicas go offline, leadership moves.

Kafka's KafkaController.processLogDirEventNotification and onBrokerLogDirFailure (ZooKeeper
mode): a broker whose log dir failed is still live, but its replicas in that dir are
offline (Kafka's replicasOnOfflineDirs). They leave the ISRs, and the partitions they
led get a new leader from the rest of the live ISR, with the leader epoch bumped; with no
such member the partition is left leaderless (unclean election is not tried here).
The notifications are read from the MetadataStore (`log_dir_event`) on every change and
on controller failover, so the handling is idempotent: a state already without the
offline replicas is not written again.
"""

from __future__ import annotations

import logging
from typing import Final

from tiercel.config.logging_setup import log_event
from tiercel.server.controller import election
from tiercel.server.controller.controller_context import ControllerContext
from tiercel.server.controller.controller_store import ControllerStore
from tiercel.server.metadata.log_dir_event import read_offline_replicas
from tiercel.server.partition import PartitionState
from tiercel.storage.topic_partition import TopicPartition

_log: Final = logging.getLogger("tiercel.controller")


async def on_log_dir_events(context: ControllerContext, store: ControllerStore) -> None:
    """Take the replicas on failed log dirs of live brokers offline."""
    sessions = {broker: epoch.session for broker, epoch in context.live_brokers.items()}
    offline = await read_offline_replicas(store.store, sessions)
    replicas = {}
    for tp in offline:
        assignment = context.assignment(tp)
        if assignment is not None:
            replicas[tp] = assignment.replicas
    if not replicas:
        return
    live = context.live_broker_ids

    def change(tp: TopicPartition, state: PartitionState) -> PartitionState | None:
        gone = offline[tp]
        online = live - gone
        if state.leader not in online:
            elected = election.elect_offline(state, replicas[tp], online, False)
            if elected is not None:
                return elected
        return election.remove_replicas_from_isr(state, sorted(gone))

    updates = await store.update_states(replicas, change)
    for tp, update in sorted(updates.items()):
        if update.written and update.state is not None:
            log_event(
                _log,
                logging.INFO,
                "partition_state_changed",
                partition=str(tp),
                reason="log_dir_failure",
                offline_replicas=",".join(map(str, sorted(offline[tp]))),
                leader=update.state.leader,
                leader_epoch=update.state.leader_epoch,
                isr=",".join(map(str, update.state.isr)),
            )
