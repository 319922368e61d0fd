"""Regular-expression subscriptions of consumer groups (ConsumerGroupHeartbeat v1, KIP-848).

A member may subscribe to a regular expression instead of, or besides, topic names. The
coordinator resolves each regular expression of a group against the topic names it
knows (a full match, as Java's ``Matcher.matches``) and persists the result as a
ConsumerGroupRegularExpression record; members subscribed to it then count as
subscribed to every topic it matched. Resolutions are refreshed together, at most once
every ten seconds per group, when a new expression arrives, when topics were created
since the last resolution, or at the latest every ten minutes (Kafka's constants).

Kafka compiles the expressions with RE2/J; Python's ``re`` accepts the RE2 syntax
clients send (it is a subset), so an expression is valid here when ``re`` compiles it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from protocol.errors import InvalidRegularExpressionError

# The least time between two refreshes of a group's regular expressions.
REGEX_BATCH_REFRESH_MIN_INTERVAL_MS: Final = 10_000
# Resolutions older than this are refreshed even when no topic was created.
REGEX_REFRESH_INTERVAL_MS: Final = 10 * 60 * 1000


@dataclass(frozen=True, slots=True)
class ResolvedRegularExpression:
    """The topics a regular expression matched, the topic-names version of the metadata
    they were matched against, and when. Immutable; any thread."""

    topics: frozenset[str]
    version: int
    timestamp: int


def compile_regex(regex: str) -> re.Pattern[str]:
    """The compiled expression; INVALID_REGULAR_EXPRESSION when it does not compile."""
    try:
        return re.compile(regex)
    except re.error as e:
        raise InvalidRegularExpressionError(
            f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {e}"
        ) from None


def resolve(
    regexes: Iterable[str], topic_names: Iterable[str], version: int, now_ms: int
) -> dict[str, ResolvedRegularExpression]:
    """Every expression with the topics it fully matches. Expressions were validated
    when members sent them; one that no longer compiles matches nothing."""
    compiled: dict[str, re.Pattern[str] | None] = {}
    for regex in regexes:
        try:
            compiled[regex] = re.compile(regex)
        except re.error:
            compiled[regex] = None
    matched: dict[str, set[str]] = {regex: set() for regex in compiled}
    for name in topic_names:
        for regex, pattern in compiled.items():
            if pattern is not None and pattern.fullmatch(name):
                matched[regex].add(name)
    return {
        regex: ResolvedRegularExpression(frozenset(topics), version, now_ms)
        for regex, topics in matched.items()
    }
