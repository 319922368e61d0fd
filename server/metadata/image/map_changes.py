"""Applying a delta's changes to one of the image's maps, as each of Kafka's deltas does
in its apply(): an entry is replaced by its change, dropped when the change is a
removal (None here, Optional.empty() there), kept when unchanged; new entries come
after the image's, in the order they changed."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TypeVar

__all__ = ["apply_changes"]

K = TypeVar("K")
V = TypeVar("V")


def apply_changes(image: Mapping[K, V], changes: Mapping[K, V | None]) -> Mapping[K, V]:
    """A new read-only map; ``image`` is left as it was."""
    result = dict(image)
    for key, value in changes.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = value
    return MappingProxyType(result)
