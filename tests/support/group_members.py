"""librdkafka consumer-group members in processes of their own, and the member-loss
scenario the group tests and tests/bench/group_failover.py share.

`Member` runs ``support.group_member`` (one librdkafka consumer) and reads back the
events it logged. `lose_a_member` starts three members on a filled topic, waits until
they split it and the first has committed on each of its partitions, SIGKILLs that one
and waits until the survivors have committed everything; it returns what a test checks
and the time from the kill to the survivors' first read of the victim's partitions.
Not thread-safe: the test (or benchmark) thread drives it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CTopicPartition

from support.broker import REPO
from support.clients import Outgoing, produce, wait_until


class Member:
    """A `support.group_member` process and the events it logged.

    Invariant: ``out`` holds the events of every incarnation since the last truncation.
    """

    def __init__(self, bootstrap: str, topic: str, group: str, out: Path, *args: str) -> None:
        self.out = out
        self.command = [
            sys.executable, "-m", "support.group_member", bootstrap, topic, group, str(out), *args,
        ]  # fmt: skip
        self.proc = self._spawn()

    def _spawn(self) -> subprocess.Popen[bytes]:
        env = {**os.environ, "PYTHONPATH": str(REPO / "tests")}
        return subprocess.Popen(self.command, env=env, cwd=REPO, stderr=subprocess.DEVNULL)

    def restart(self) -> None:
        self.proc = self._spawn()

    def events(self) -> list[list[str]]:
        if not self.out.exists():
            return []
        return [line.split() for line in self.out.read_text().splitlines() if line]

    def assignment(self) -> set[int]:
        """Partitions held now: the latest eager assignment (``A``) or the incremental
        ones (``I``, KIP-848), less those revoked since."""
        held: set[int] = set()
        for event in self.events():
            if event[0] not in ("A", "I", "R"):
                continue  # M, C, and E lines, whose third field is an error text
            partitions = {int(p) for p in event[2].split(",") if p} if len(event) > 2 else set()
            if event[0] == "A":
                held = partitions
            elif event[0] == "I":
                held |= partitions
            elif event[0] == "R":
                held -= partitions
        return held

    def last_assigned_at(self) -> float:
        return max(float(e[1]) for e in self.events() if e[0] in ("A", "I"))

    def rows(self, kind: str) -> list[tuple[float, int, int]]:
        """(time, partition, offset) of the ``M`` (read) or ``C`` (committed) events."""
        return [
            (float(t), int(p), int(o))
            for k, t, p, o in (e for e in self.events() if len(e) == 4)
            if k == kind
        ]

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()


def fill(bootstrap: str, topic: str, partitions: int, per_partition: int, start: int = 0) -> None:
    """Produce values ``start`` .. ``start + per_partition - 1`` to every partition."""
    records = [
        Outgoing(p, b"%d-%d" % (p, i))
        for i in range(start, start + per_partition)
        for p in range(partitions)
    ]
    produce("confluent", bootstrap, topic, records, {"linger.ms": 5})


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets as an admin-style OffsetFetch (no member) returns."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = [CTopicPartition(topic, p) for p in range(partitions)]
        return {tp.partition: tp.offset for tp in consumer.committed(tps, timeout=10)}
    finally:
        consumer.close()


def read_counts(members: list[Member]) -> dict[tuple[int, int], int]:
    """How many times the members read each (partition, offset)."""
    seen: dict[tuple[int, int], int] = {}
    for member in members:
        for _, p, offset in member.rows("M"):
            seen[p, offset] = seen.get((p, offset), 0) + 1
    return seen


def split_evenly(members: list[Member], partitions: int) -> bool:
    held = [m.assignment() for m in members]
    each = partitions // len(members)
    return all(len(h) == each for h in held) and set().union(*held) == set(range(partitions))


@dataclass(frozen=True)
class MemberLoss:
    """What `lose_a_member` saw: ``taken_over`` maps each victim partition the survivors
    read after the kill to (time, offset) of their first read there."""

    members: list[Member]
    victim_partitions: set[int]
    killed_at: float
    committed_at_kill: dict[int, int]
    taken_over: dict[int, tuple[float, int]]

    @property
    def rebalance_s(self) -> float:
        """From the SIGKILL to the survivors' first read of a victim partition."""
        return min(t for t, _ in self.taken_over.values()) - self.killed_at


def lose_a_member(
    bootstrap: str,
    topic: str,
    group: str,
    partitions: int,
    per_partition: int,
    out_dir: Path,
    members: list[Member],
    member_args: tuple[str, ...],
) -> MemberLoss:
    """Three members share the filled ``topic``; the first is SIGKILLed once it has
    committed on each of its partitions. ``members`` (the caller's, so that it kills
    them all at the end) receives the three."""
    fill(bootstrap, topic, partitions, per_partition)
    members += [
        Member(bootstrap, topic, group, out_dir / f"{group}-m{i}.log", *member_args)
        for i in range(3)
    ]
    assert wait_until(lambda: split_evenly(members, partitions), 30), [m.events() for m in members]
    victim, survivors = members[0], members[1:]
    victim_partitions = victim.assignment()
    assigned_at = victim.last_assigned_at()
    assert wait_until(
        lambda: victim_partitions <= {p for t, p, _ in victim.rows("C") if t >= assigned_at}, 20
    ), victim.events()
    killed_at = time.time()
    victim.kill()
    at_kill = committed(bootstrap, group, topic, partitions)

    def all_committed() -> bool:
        done = dict.fromkeys(range(partitions), 0)
        for member in members:
            for _, p, offset in member.rows("C"):
                done[p] = max(done[p], offset)
        return set(done.values()) == {per_partition}

    assert wait_until(all_committed, 60), [m.events() for m in members]
    first: dict[int, tuple[float, int]] = {}
    for member in survivors:
        for t, p, offset in member.rows("M"):
            if p in victim_partitions and t > killed_at and (p not in first or t < first[p][0]):
                first[p] = (t, offset)
    return MemberLoss(members, victim_partitions, killed_at, at_kill, first)
