"""Kafka's key-to-partition rule for coordinators: Utils.abs(String.hashCode) % n."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiercel.server.coordinator.coordinator_partition import (
    java_string_hash,
    partition_for,
    utils_abs,
)

INT_MIN = -(2**31)


@pytest.mark.parametrize(
    ("key", "java_hash"),
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("Aa", 2112),
        ("BB", 2112),
        ("my-group", -1906497762),
        ("polygenelubricants", INT_MIN),
        ("\U0001f600", 0xD83D * 31 + 0xDE00),  # one code point, two UTF-16 units
        ("g\U0001f600", (ord("g") * 31 + 0xD83D) * 31 + 0xDE00),
    ],
)
def test_java_string_hash(key: str, java_hash: int) -> None:
    assert java_string_hash(key) == java_hash


@settings(max_examples=100)
@given(st.text(max_size=30))
def test_java_string_hash_is_the_polynomial_over_utf16_units(text: str) -> None:
    """s[0]*31^(n-1) + ... + s[n-1], in int32: Java's definition of String.hashCode."""
    units = text.encode("utf-16-be")
    codes = [int.from_bytes(units[i : i + 2], "big") for i in range(0, len(units), 2)]
    total = sum(c * 31 ** (len(codes) - 1 - i) for i, c in enumerate(codes)) % 2**32
    assert java_string_hash(text) == (total - 2**32 if total >= 2**31 else total)


def test_utils_abs_maps_integer_min_value_to_zero() -> None:
    assert utils_abs(INT_MIN) == 0
    assert utils_abs(INT_MIN + 1) == 2**31 - 1
    assert utils_abs(-5) == 5 and utils_abs(5) == 5 and utils_abs(0) == 0


def test_partition_for_is_kafkas() -> None:
    # Kafka puts "my-group" in __consumer_offsets-12 of 50; masking the sign bit
    # (hash & 0x7fffffff) would give 36.
    assert partition_for("my-group", 50) == 12
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("hello", 7) == 99162322 % 7
    assert partition_for("g\U0001f600", 50) == abs((ord("g") * 31 + 0xD83D) * 31 + 0xDE00) % 50


@settings(max_examples=100)
@given(st.text(max_size=30), st.integers(1, 200))
def test_partition_for_is_abs_hash_modulo(key: str, partitions: int) -> None:
    h = java_string_hash(key)
    expected = 0 if h == INT_MIN else abs(h) % partitions
    assert partition_for(key, partitions) == expected
