"""StripedReplicaPlacer: replicas spread across racks and brokers, unfenced first, never a
fenced leader, and Kafka's refusals."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from tiercel.protocol.errors import InvalidReplicationFactorError
from tiercel.server.controller.striped_replica_placer import StripedReplicaPlacer, UsableBroker


def test_every_partition_spans_all_racks_and_leaders_are_spread() -> None:
    brokers = [UsableBroker(i, "abc"[i % 3], False) for i in range(9)]
    placements = StripedReplicaPlacer(random.Random(1)).place(90, 3, brokers)
    for replicas in placements:
        assert len(set(replicas)) == 3
        assert {brokers[r].rack for r in replicas} == {"a", "b", "c"}
    assert set(Counter(r[0] for r in placements).values()) == {10}


def test_fenced_brokers_only_follow_and_only_when_needed() -> None:
    brokers = [
        UsableBroker(1, None, False),
        UsableBroker(2, None, True),
        UsableBroker(3, None, False),
    ]
    placer = StripedReplicaPlacer(random.Random(2))
    for replicas in placer.place(20, 2, brokers):
        assert 2 not in replicas
    for replicas in placer.place(20, 3, brokers):
        assert replicas[0] != 2 and sorted(replicas) == [1, 2, 3]


def test_refusals() -> None:
    placer = StripedReplicaPlacer(random.Random(3))
    with pytest.raises(InvalidReplicationFactorError, match="All brokers are currently fenced"):
        placer.place(1, 1, [UsableBroker(1, None, True)])
    with pytest.raises(InvalidReplicationFactorError, match="only 1 broker"):
        placer.place(1, 2, [UsableBroker(1, None, False)])
    with pytest.raises(InvalidReplicationFactorError, match="must be positive"):
        placer.place(1, 0, [UsableBroker(1, None, False)])
