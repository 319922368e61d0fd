"""How a heartbeat changes a group's regular-expression subscriptions (Kafka's
maybeUpdateRegularExpressions), with the resolution done inline rather than in a
background task: Kafka answers first and bumps the group epoch in a second write once
the expression is resolved; here the same heartbeat carries both, so the member is
assigned the matched topics one heartbeat earlier. The refresh rules are Kafka's
(`regex`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from tiercel.server.coordinator.group.consumer_group_records import (
    ConsumerGroupKey,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupValue,
)
from tiercel.server.coordinator.group.modern.consumer_group import ConsumerGroup
from tiercel.server.coordinator.group.modern.member import ConsumerGroupMember
from tiercel.server.coordinator.group.modern.regex import (
    REGEX_BATCH_REFRESH_MIN_INTERVAL_MS,
    REGEX_REFRESH_INTERVAL_MS,
    ResolvedRegularExpression,
    compile_regex,
    resolve,
)
from tiercel.server.metadata.metadata_cache import MetadataCache


class RegexStatus(Enum):
    NO_CHANGE = 0
    UPDATED = 1
    UPDATED_AND_RESOLVED = 2


@dataclass(frozen=True, slots=True)
class RegexUpdate:
    """The records to write, the group's resolutions once they are, and whether the
    group epoch must grow: the member moved to (or off) an expression already resolved,
    or a refresh changed what some expression matches. Immutable."""

    status: RegexStatus
    resolved: dict[str, ResolvedRegularExpression]
    topics_changed: bool
    records: list[tuple[ConsumerGroupKey, ConsumerGroupValue | None]]

    @property
    def bumps_epoch(self) -> bool:
        return self.status is RegexStatus.UPDATED_AND_RESOLVED or self.topics_changed


def update_regexes(
    group: ConsumerGroup,
    member: ConsumerGroupMember,
    updated: ConsumerGroupMember,
    now: int,
    cache: MetadataCache,
) -> RegexUpdate:
    """``member`` becomes ``updated``; INVALID_REGULAR_EXPRESSION for a new expression
    that does not compile."""
    records: list[tuple[ConsumerGroupKey, ConsumerGroupValue | None]] = []
    resolved = dict(group.resolved_regexes)
    old, new = member.subscribed_topic_regex, updated.subscribed_topic_regex
    # The member was the last one subscribed to its old expression: it goes.
    last_of_old = (
        old is not None and member.member_id in group.members and group.regex_subscribers(old) == 1
    )
    status = RegexStatus.NO_CHANGE
    refresh = False
    if old != new:
        status = RegexStatus.UPDATED
        if last_of_old:
            assert old is not None
            records.append((ConsumerGroupRegularExpressionKey(group.group_id, old), None))
            resolved.pop(old, None)
        if new is not None:
            if group.regex_subscribers(new) == 0:
                compile_regex(new)
                refresh = True
            elif new in resolved:
                status = RegexStatus.UPDATED_AND_RESOLVED
        elif old is not None:
            status = RegexStatus.UPDATED_AND_RESOLVED
    subscribed = {r for r, n in group.subscribed_regexes.items() if n > 0}
    if last_of_old and old != new:
        subscribed.discard(old or "")
    if new is not None:
        subscribed.add(new)
    last_refresh = group.last_regex_refresh_ms
    version = cache.topic_names_version
    if not subscribed or now <= last_refresh + REGEX_BATCH_REFRESH_MIN_INTERVAL_MS:
        return RegexUpdate(status, resolved, False, records)
    refresh = (
        refresh
        or not subscribed <= resolved.keys()
        or group.regex_version < version
        or now > last_refresh + REGEX_REFRESH_INTERVAL_MS
    )
    if not refresh:
        return RegexUpdate(status, resolved, False, records)
    changed = False
    for regex, resolution in resolve(subscribed, cache.topics, version, now).items():
        before = resolved.get(regex)
        changed = changed or resolution.topics != (before.topics if before else frozenset())
        resolved[regex] = resolution
        records.append(
            (
                ConsumerGroupRegularExpressionKey(group.group_id, regex),
                ConsumerGroupRegularExpressionValue(tuple(sorted(resolution.topics)), version, now),
            )
        )
    return RegexUpdate(status, resolved, changed, records)
