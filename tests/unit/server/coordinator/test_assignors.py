"""The server-side assignors of consumer groups: every subscribed partition owned exactly
once, by a subscriber; the uniform assignor balanced and sticky, the range assignor
contiguous, co-partitioned and stable for static members."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from tiercel.server.coordinator.group.modern.assignment import Assignment, pairs
from tiercel.server.coordinator.group.modern.assignor import (
    GroupSpec,
    MemberSubscription,
    is_homogeneous,
)
from tiercel.server.coordinator.group.modern.range_assignor import RangeAssignor
from tiercel.server.coordinator.group.modern.uniform_assignor import UniformAssignor

TOPICS = [uuid.UUID(int=i + 1) for i in range(4)]
UNIFORM = UniformAssignor()
RANGE = RangeAssignor()


@st.composite
def groups(
    draw: st.DrawFn, homogeneous: bool | None = None
) -> tuple[GroupSpec, dict[uuid.UUID, int]]:
    """A group with a consistent current assignment (as a previous target would be)."""
    counts = {t: draw(st.integers(0, 9)) for t in TOPICS[: draw(st.integers(1, 4))]}
    member_ids = [f"m{i}" for i in range(draw(st.integers(1, 6)))]
    same = draw(st.booleans()) if homogeneous is None else homogeneous
    topic_sets = st.frozensets(st.sampled_from(sorted(counts)), min_size=1)
    shared = draw(topic_sets)
    subscriptions = {m: shared if same else draw(topic_sets) for m in member_ids}
    owners: dict[str, set[tuple[uuid.UUID, int]]] = {m: set() for m in member_ids}
    for topic_id, count in counts.items():
        for partition in range(count):
            owner = draw(st.sampled_from([None, *member_ids]))
            if owner is not None:
                owners[owner].add((topic_id, partition))
    members = {
        m: MemberSubscription(
            draw(
                st.none()
                | st.sampled_from(["i0", "i1", "i2", "i3", "i4", "i5"]).map(
                    lambda i, m=m: f"{i}-{m}"
                )
            ),
            None,
            subscriptions[m],
            _assignment(owners[m]),
        )
        for m in member_ids
    }
    return GroupSpec(members, is_homogeneous(subscriptions)), counts


def _assignment(owned: set[tuple[uuid.UUID, int]]) -> Assignment:
    out: dict[uuid.UUID, set[int]] = {}
    for topic_id, partition in owned:
        out.setdefault(topic_id, set()).add(partition)
    return {t: frozenset(p) for t, p in out.items()}


def size(assignment: Assignment) -> int:
    return sum(len(partitions) for partitions in assignment.values())


def _check_complete_and_exclusive(
    group: GroupSpec, counts: Mapping[uuid.UUID, int], result: Mapping[str, Assignment]
) -> None:
    assert set(result) == set(group.members)
    owner: dict[tuple[uuid.UUID, int], str] = {}
    for member_id, assignment in result.items():
        for tp in pairs(assignment):
            assert tp not in owner, f"{tp} owned by {owner[tp]} and {member_id}"
            assert tp[0] in group.members[member_id].topic_ids, "assigned an unsubscribed topic"
            assert tp[1] < counts[tp[0]]
            owner[tp] = member_id
    subscribed = {t for m in group.members.values() for t in m.topic_ids}
    expected = {(t, p) for t in subscribed for p in range(counts[t])}
    assert set(owner) == expected


def _with_targets(group: GroupSpec, result: Mapping[str, Assignment]) -> GroupSpec:
    members = {m: replace(spec, assignment=result[m]) for m, spec in group.members.items()}
    return GroupSpec(members, group.homogeneous)


# -- uniform ------------------------------------------------------------------------------


@settings(max_examples=150)
@given(groups())
def test_uniform_owns_every_partition_once_and_is_balanced(
    case: tuple[GroupSpec, dict[uuid.UUID, int]],
) -> None:
    group, counts = case
    result = UNIFORM.assign(group, counts)
    _check_complete_and_exclusive(group, counts, result)
    sizes = {m: size(a) for m, a in result.items()}
    if group.homogeneous:
        assert max(sizes.values()) - min(sizes.values()) <= 1
    # No partition could move to a subscriber of its topic two or more partitions smaller.
    for giver, assignment in result.items():
        for topic_id, _ in pairs(assignment):
            for receiver, spec in group.members.items():
                if topic_id in spec.topic_ids:
                    assert sizes[giver] - sizes[receiver] <= 1, (giver, receiver, sizes)


@settings(max_examples=150)
@given(groups(homogeneous=True))
def test_uniform_homogeneous_moves_only_what_balance_requires(
    case: tuple[GroupSpec, dict[uuid.UUID, int]],
) -> None:
    group, counts = case
    result = UNIFORM.assign(group, counts)
    gained, lost = [], []
    for member_id, spec in group.members.items():
        # What it had of topics it still subscribes to (the rest it loses anyway).
        before = {tp for tp in pairs(spec.assignment) if tp[0] in spec.topic_ids}
        after = set(pairs(result[member_id]))
        # A member either keeps everything it had (and maybe gains), or only loses.
        assert before <= after or after <= before, (member_id, before, after)
        assert len(before & after) == min(len(before), len(after))
        if len(after) > len(before):
            gained.append(len(after))
        elif len(after) < len(before):
            lost.append(len(after))
    # The extra partition of an uneven split stays with a member that already had it:
    # nobody loses one only for another member to end up larger.
    assert not gained or not lost or min(lost) >= max(gained), (gained, lost)


@settings(max_examples=100)
@given(groups())
def test_uniform_is_stable_once_assigned(case: tuple[GroupSpec, dict[uuid.UUID, int]]) -> None:
    group, counts = case
    first = UNIFORM.assign(group, counts)
    assert UNIFORM.assign(_with_targets(group, first), counts) == first


@settings(max_examples=100)
@given(groups(homogeneous=True), st.data())
def test_uniform_member_leaving_moves_only_its_partitions(
    case: tuple[GroupSpec, dict[uuid.UUID, int]], data: st.DataObject
) -> None:
    group, counts = case
    balanced = _with_targets(group, UNIFORM.assign(group, counts))
    if len(balanced.members) < 2:
        return
    leaving = data.draw(st.sampled_from(sorted(balanced.members)))
    remaining = {m: s for m, s in balanced.members.items() if m != leaving}
    after = UNIFORM.assign(GroupSpec(remaining, True), counts)
    for member_id, spec in remaining.items():
        assert set(pairs(spec.assignment)) <= set(pairs(after[member_id]))


# -- range --------------------------------------------------------------------------------


@settings(max_examples=150)
@given(groups())
def test_range_gives_contiguous_balanced_ranges(
    case: tuple[GroupSpec, dict[uuid.UUID, int]],
) -> None:
    group, counts = case
    result = RANGE.assign(group, counts)
    _check_complete_and_exclusive(group, counts, result)
    for topic_id in counts:
        subscribers = [m for m, s in group.members.items() if topic_id in s.topic_ids]
        held = [sorted(result[m].get(topic_id, ())) for m in subscribers]
        for partitions in held:
            assert (
                partitions == list(range(partitions[0], partitions[0] + len(partitions)))
                if partitions
                else True
            )
        lengths = [len(h) for h in held]
        if lengths:
            assert max(lengths) - min(lengths) <= 1


@settings(max_examples=100)
@given(st.integers(1, 6), st.integers(1, 9), st.integers(1, 3))
def test_range_co_partitions_topics_of_equal_size(
    members: int, partitions: int, topics: int
) -> None:
    subscribed = frozenset(TOPICS[:topics])
    group = GroupSpec(
        {f"m{i}": MemberSubscription(None, None, subscribed, {}) for i in range(members)}, True
    )
    result = RANGE.assign(group, dict.fromkeys(subscribed, partitions))
    for assignment in result.values():
        numbers = {frozenset(assignment.get(t, ())) for t in subscribed}
        assert len(numbers) == 1, assignment


def test_range_static_member_under_a_new_member_id_gets_its_ranges_back() -> None:
    topic = TOPICS[0]
    specs = {
        "z-old": MemberSubscription("instance-a", None, frozenset({topic}), {}),
        "b": MemberSubscription("instance-b", None, frozenset({topic}), {}),
        "c": MemberSubscription(None, None, frozenset({topic}), {}),
    }
    before = RANGE.assign(GroupSpec(specs, True), {topic: 7})
    specs["a-new"] = specs.pop("z-old")
    after = RANGE.assign(GroupSpec(specs, True), {topic: 7})
    assert after["a-new"] == before["z-old"] == {topic: frozenset({0, 1, 2})}
    assert after["b"] == before["b"]
    assert after["c"] == before["c"]


def test_assignors_of_an_empty_group_return_nothing() -> None:
    assert UNIFORM.assign(GroupSpec({}, True), {}) == {}
    assert RANGE.assign(GroupSpec({}, True), {}) == {}
