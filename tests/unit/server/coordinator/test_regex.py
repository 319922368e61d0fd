"""Client regular expressions are matched in linear time (RE2), never backtracking."""

from __future__ import annotations

import time

import pytest

from tiercel.protocol.errors import InvalidRegularExpressionError
from tiercel.server.coordinator.group.modern.regex import compile_regex, resolve


def test_a_catastrophic_backtracking_pattern_is_matched_in_linear_time() -> None:
    # With Python's re, (\w|\w)*X against 40 "a"s takes days; RE2 answers at once.
    started = time.monotonic()
    resolved = resolve([r"(\w|\w)*X"], ["a" * 240, "aaX"], version=1, now_ms=0)
    assert time.monotonic() - started < 0.5
    assert resolved[r"(\w|\w)*X"].topics == frozenset({"aaX"})


def test_full_match_semantics_and_rejections() -> None:
    resolved = resolve(["orders-.*", "pay"], ["orders-eu", "orders", "pay", "payments"], 1, 0)
    assert resolved["orders-.*"].topics == frozenset({"orders-eu"})
    assert resolved["pay"].topics == frozenset({"pay"})
    with pytest.raises(InvalidRegularExpressionError):
        compile_regex(r"(a)\1")  # backreferences: RE2 (and Kafka's RE2/J) reject them
    with pytest.raises(InvalidRegularExpressionError):
        compile_regex("(unclosed")
