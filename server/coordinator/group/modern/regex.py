"""Regular-expression subscriptions of consumer groups (ConsumerGroupHeartbeat v1, KIP-848).

A member may subscribe to a regular expression instead of, or besides, topic names. The
coordinator resolves each regular expression of a group against the topic names it
knows (a full match, as Java's ``Matcher.matches``) and persists the result as a
ConsumerGroupRegularExpression record; members subscribed to it then count as
subscribed to every topic it matched. Resolutions are refreshed together, at most once
every ten seconds per group, when a new expression arrives, when topics were created
since the last resolution, or at the latest every ten minutes (Kafka's constants).

Expressions come from clients and are matched on the event loop, so they are compiled
with RE2 (google-re2), as Kafka compiles them with RE2/J: matching takes time linear in
the topic name whatever the expression (Python's backtracking ``re`` can be made to run
for hours by one heartbeat). An expression is valid when RE2 compiles it; what RE2
rejects (backreferences, lookaround) Kafka rejects too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

import re2

from tiercel.protocol.errors import InvalidRegularExpressionError

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


def _options() -> Any:
    options = re2.Options()
    options.log_errors = False  # a client's bad expression is answered, not logged by RE2
    return options


_OPTIONS: Final = _options()


def _compile(regex: str) -> Any:
    return re2.compile(regex, _OPTIONS)


def compile_regex(regex: str) -> Any:
    """The compiled expression; INVALID_REGULAR_EXPRESSION when RE2 does not compile it."""
    try:
        return _compile(regex)
    except re2.error as e:
        raise InvalidRegularExpressionError(
            f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {e}"
        ) from None


def resolve(
    regexes: Iterable[str], topic_names: Iterable[str], version: int, now_ms: int
) -> dict[str, ResolvedRegularExpression]:
    """Every expression with the topics it fully matches. Expressions were validated
    when members sent them; one that no longer compiles matches nothing."""
    compiled: dict[str, Any] = {}
    for regex in regexes:
        try:
            compiled[regex] = _compile(regex)
        except re2.error:
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
