"""ProducerIdControlManager: blocks of 1000 ids, never handed out twice, for registered
brokers of the current incarnation only."""

from __future__ import annotations

import pytest
from control_manager_support import ManagersContext

from tiercel.protocol.metadata.cluster_records import ProducerIdsRecord
from tiercel.server.controller.controller_exceptions import StaleBrokerEpochError


def test_blocks_follow_each_other_and_survive_a_snapshot() -> None:
    ctx = ManagersContext()
    ctx.add_brokers(1, 2)
    epochs = {b: ctx.state.cluster.broker_registrations[b].epoch for b in (1, 2)}
    first = ctx.run(ctx.state.producer_ids.generate_next_producer_id(1, epochs[1]))
    second = ctx.run(ctx.state.producer_ids.generate_next_producer_id(2, epochs[2]))
    assert (first.broker_id, first.first_producer_id, first.size) == (1, 0, 1000)
    assert (second.broker_id, second.first_producer_id) == (2, 1000)
    assert [r.message for r in ctx.state.producer_ids.records()] == [
        ProducerIdsRecord(broker_id=-1, broker_epoch=-1, next_producer_id=2000)
    ]
    fresh = ManagersContext()
    fresh.replay(list(ctx.state.records()))
    assert fresh.state.producer_ids.next_producer_id == 2000


def test_stale_epoch_is_refused_and_replay_never_goes_back() -> None:
    ctx = ManagersContext()
    ctx.add_brokers(1)
    with pytest.raises(StaleBrokerEpochError):
        ctx.state.producer_ids.generate_next_producer_id(1, 12345)
    ctx.state.producer_ids.replay(ProducerIdsRecord(broker_id=1, next_producer_id=1000))
    with pytest.raises(RuntimeError, match="not greater"):
        ctx.state.producer_ids.replay(ProducerIdsRecord(broker_id=1, next_producer_id=1000))
