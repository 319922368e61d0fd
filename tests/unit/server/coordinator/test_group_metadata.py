"""GroupMetadata's state machine and bookkeeping, the subscription parser and the
OffsetStore, without a coordinator around them."""

from __future__ import annotations

import itertools

import pytest
from group_support import NOW, subscription

from tiercel.protocol.errors import ErrorCode
from tiercel.server.coordinator.group.consumer_protocol import subscribed_topics
from tiercel.server.coordinator.group.group_metadata import GroupMetadata, GroupState, load_group
from tiercel.server.coordinator.group.group_results import JoinGroupResult, SyncGroupResult
from tiercel.server.coordinator.group.member_metadata import MemberMetadata
from tiercel.server.coordinator.group.offset_and_metadata import OffsetAndMetadata
from tiercel.server.coordinator.group.offset_store import OffsetStore
from tiercel.storage.topic_partition import TopicPartition

S = GroupState
ALLOWED = {
    S.PREPARING_REBALANCE: {S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY},
    S.COMPLETING_REBALANCE: {S.PREPARING_REBALANCE},
    S.STABLE: {S.COMPLETING_REBALANCE},
    S.EMPTY: {S.PREPARING_REBALANCE},
    S.DEAD: set(S),
}


def member(
    member_id: str, *protocols: str, instance: str | None = None, topics: tuple[str, ...] = ("t",)
) -> MemberMetadata:
    return MemberMetadata(
        member_id,
        instance,
        "client",
        "/127.0.0.1",
        30_000,
        10_000,
        "consumer",
        tuple((p, subscription(list(topics))) for p in protocols or ("range",)),
    )


def group(state: GroupState = S.EMPTY) -> GroupMetadata:
    return GroupMetadata("g", state, lambda: NOW)


@pytest.mark.parametrize(("source", "target"), list(itertools.product(S, S)))
def test_transitions_follow_kafkas_table(source: GroupState, target: GroupState) -> None:
    g = group(source)
    if source in ALLOWED[target]:
        g.transition_to(target)
        assert g.state is target
    else:
        with pytest.raises(RuntimeError):
            g.transition_to(target)
        assert g.state is source


def test_protocol_selection_votes_among_protocols_all_members_support() -> None:
    g = group()
    g.add(member("a", "roundrobin", "range", "sticky"))
    g.add(member("b", "range", "roundrobin"))
    g.add(member("c", "range", "roundrobin"))
    # Candidates: range and roundrobin (sticky is a's alone); b and c prefer range.
    assert g.select_protocol() == "range"
    g.remove("b")
    g.remove("c")
    assert g.select_protocol() == "roundrobin"


def test_protocol_support_of_joining_members() -> None:
    g = group()
    assert not g.supports_protocols("", frozenset({"range"}))
    assert not g.supports_protocols("consumer", frozenset())
    g.add(member("a", "range", "sticky"))
    g.transition_to(S.PREPARING_REBALANCE)
    assert g.supports_protocols("consumer", frozenset({"sticky", "other"}))
    assert not g.supports_protocols("consumer", frozenset({"other"}))
    assert not g.supports_protocols("connect", frozenset({"range"}))


def test_leader_passes_on_and_static_ids_are_tracked() -> None:
    g = group()
    g.add(member("a"))
    g.add(member("b", instance="i-b"))
    assert g.leader_id == "a"
    assert g.current_static_member_id("i-b") == "b"
    g.remove("a")
    assert g.leader_id == "b"
    g.remove("b")
    assert (g.leader_id, g.static_members) == (None, {})
    with pytest.raises(RuntimeError):
        g.add(member("c", instance="i-c"))
        g.add(member("d", instance="i-c"))


def test_replacing_a_static_member_fences_its_parked_requests() -> None:
    g = group()
    answers: list[object] = []
    old = member("old", instance="i")
    g.add(old, answers.append)
    old.awaiting_sync_callback = answers.append
    assert g.num_members_awaiting_join == 1
    replaced = g.replace_static_member("i", "old", "new")
    assert replaced is old and old.member_id == "new"
    assert answers == [
        JoinGroupResult("old", ErrorCode.fenced_instance_id),
        SyncGroupResult(ErrorCode.fenced_instance_id),
    ]
    assert (g.leader_id, g.num_members_awaiting_join, list(g.members)) == ("new", 0, ["new"])
    assert g.current_static_member_id("i") == "new"


def test_all_members_joined_counts_parked_joins_and_pending_members() -> None:
    g = group()
    a, b = member("a"), member("b")
    g.add(a, lambda _: None)
    g.add(b)
    assert not g.has_all_members_joined
    g.update_member(b, b.supported_protocols, 1, 1, lambda _: None)
    assert g.has_all_members_joined
    g.add_pending_member("p")
    assert not g.has_all_members_joined
    g.maybe_invoke_join_callback(a, JoinGroupResult("a", ErrorCode.none))
    assert g.num_members_awaiting_join == 1
    assert [m.member_id for m in g.not_yet_rejoined_members()] == ["a"]


def test_a_new_generation_selects_protocol_and_subscriptions() -> None:
    g = group()
    g.add(member("a", topics=("t1", "t2")))
    g.add(member("b", topics=("t3",)))
    g.transition_to(S.PREPARING_REBALANCE)
    g.init_next_generation()
    assert (g.state, g.generation_id, g.protocol_name) == (S.COMPLETING_REBALANCE, 1, "range")
    assert g.subscribed_topics == {"t1", "t2", "t3"}
    assert g.is_subscribed_to_topic("t3") and not g.is_subscribed_to_topic("t4")
    assert [m.member_id for m in g.current_member_metadata()] == ["a", "b"]
    g.remove("a")
    g.remove("b")
    g.transition_to(S.PREPARING_REBALANCE)
    g.init_next_generation()
    assert (g.state, g.generation_id, g.protocol_name, g.subscribed_topics) == (
        S.EMPTY,
        2,
        None,
        frozenset(),
    )


def test_unparsable_subscriptions_leave_topics_unknown() -> None:
    g = group()
    g.add(MemberMetadata("a", None, "c", "h", 1, 1, "consumer", (("range", b"\x00"),)))
    g.transition_to(S.PREPARING_REBALANCE)
    g.init_next_generation()
    assert g.subscribed_topics is None
    assert g.is_subscribed_to_topic("anything")  # OffsetDelete errs on the safe side


def test_subscription_parser() -> None:
    assert subscribed_topics(subscription(["a", "bb"])) == {"a", "bb"}
    assert subscribed_topics(subscription([])) == frozenset()
    assert subscribed_topics(b"\x00\x01\x00\x00\x00\x02\x00\x01a") is None  # truncated
    assert subscribed_topics(b"\x00\x01\xff\xff\xff\xff") is None


def test_summary_shows_metadata_only_when_stable() -> None:
    g = group()
    a = member("a")
    a.assignment = b"x"
    g.add(a)
    g.transition_to(S.PREPARING_REBALANCE)
    assert g.summary().protocol == "" and g.summary().members[0].metadata == b""
    g.init_next_generation()
    g.transition_to(S.STABLE)
    summary = g.summary()
    assert (summary.state, summary.protocol_type, summary.protocol) == (
        "Stable",
        "consumer",
        "range",
    )
    assert (summary.members[0].metadata, summary.members[0].assignment) == (
        subscription(["t"]),
        b"x",
    )
    assert g.overview().group_type == "classic"


def offset(value: int, ts: int = NOW, record_offset: int = -1) -> OffsetAndMetadata:
    return OffsetAndMetadata(value, -1, "", ts, None, record_offset)


def test_offset_expiration_rules() -> None:
    simple = group()
    assert simple.offset_expiration() is not None  # offsets only: commit timestamps count
    emptied = load_group("g", 3, "consumer", None, None, NOW + 50, [], lambda: NOW)
    rule = emptied.offset_expiration()
    assert rule is not None and rule.base(offset(1, ts=NOW)) == NOW + 50
    active = load_group(
        "g", 3, "consumer", "range", "a", NOW, [member("a", topics=("t",))], lambda: NOW
    )
    rule = active.offset_expiration()
    assert rule is not None and rule.excluded_topics == {"t"}
    active.transition_to(S.PREPARING_REBALANCE)
    assert active.offset_expiration() is None


def test_offset_store_keeps_the_latest_record_and_expires_by_rule() -> None:
    store = OffsetStore()
    tp = TopicPartition("t", 0)
    store.put("g", tp, offset(5, record_offset=10))
    store.put("g", tp, offset(4, record_offset=9))  # written earlier, completed later
    assert store.get("g", tp) == offset(5, record_offset=10)
    rule = group().offset_expiration()
    assert rule is not None
    assert store.expired("g", NOW + 99, 100, rule) == []
    assert store.expired("g", NOW + 100, 100, rule) == [tp]
    store.begin_commit("g", [tp])
    assert store.expired("g", NOW + 100, 100, rule) == []  # a commit is in flight
    assert store.remove("g", [tp]) == [tp]
    store.end_commit("g", [tp], {tp: offset(6, record_offset=11)})
    assert store.get("g", tp) is None  # deleted while being written: stays deleted
    assert not store.has_offsets("g")
