"""The definition machinery of broker and topic configs: Kafka's `ConfigDef` in small.

A `ConfigDef` names one key with its type, default, validator and doc; validators raise
ValueError with a sentence a user can act on and print in Kafka's notation ("[1,...]").
`ConfigType` and `ConfigSource` are numbered as DescribeConfigs carries them. Parsing and
rendering of values are in `config_values`; the tables are in the `*_configs` modules.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Final

__all__ = [
    "LONG_MAX",
    "AtLeast",
    "ConfigDef",
    "ConfigError",
    "ConfigSource",
    "ConfigType",
    "InRange",
    "ListOf",
    "NonEmptyDistinct",
    "NonEmptyString",
    "OneOf",
    "Validator",
    "at_least",
    "in_range",
    "list_of",
    "non_empty_distinct",
    "non_empty_string",
    "one_of",
]

LONG_MAX: Final = 2**63 - 1


class ConfigError(Exception):
    """A config key or value was rejected; `key` names it (None for file-level problems)."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key

    @property
    def message(self) -> str:
        return str(self)


class ConfigType(IntEnum):
    """Kafka's `ConfigDef.Type`, numbered as DescribeConfigs' config_type field.

    UNKNOWN is for DescribeConfigs only: Kafka reports it for a key with no definition
    (the prefixed keys passed through to the remote storage plugins); no ConfigDef has it.
    """

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(IntEnum):
    """Where a described value comes from, numbered as DescribeConfigs' config_source."""

    UNKNOWN = 0
    TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


# --- validators: callables raising ValueError with a sentence a user can act on ------------

Validator = Callable[[object], None]


@dataclass(frozen=True, slots=True)
class AtLeast:
    """Accepts numbers >= minimum; str() is Kafka's "[min,...]" notation."""

    minimum: float

    def __call__(self, value: object) -> None:
        if not isinstance(value, int | float) or value < self.minimum:
            raise ValueError(f"must be at least {_number(self.minimum)}")

    def __str__(self) -> str:
        return f"[{_number(self.minimum)},...]"


@dataclass(frozen=True, slots=True)
class InRange:
    """Accepts numbers in [low, high]; str() is Kafka's "[low,...,high]" notation."""

    low: float
    high: float

    def __call__(self, value: object) -> None:
        if not isinstance(value, int | float) or not self.low <= value <= self.high:
            raise ValueError(f"must be between {_number(self.low)} and {_number(self.high)}")

    def __str__(self) -> str:
        return f"[{_number(self.low)},...,{_number(self.high)}]"


@dataclass(frozen=True, slots=True)
class OneOf:
    """Accepts exactly one of `choices` (case-sensitive, as Kafka's ValidString)."""

    choices: tuple[str, ...]

    def __call__(self, value: object) -> None:
        if value not in self.choices:
            raise ValueError(f"must be one of {', '.join(self.choices)}")

    def __str__(self) -> str:
        return f"[{', '.join(self.choices)}]"


@dataclass(frozen=True, slots=True)
class ListOf:
    """Applies `element` to every item of a list value (Kafka's ValidList)."""

    element: Validator

    def __call__(self, value: object) -> None:
        if not isinstance(value, tuple):
            raise ValueError("must be a list")
        for item in value:
            try:
                self.element(item)
            except ValueError as e:
                raise ValueError(f"element {item!r} {e}") from None

    def __str__(self) -> str:
        return str(self.element)


@dataclass(frozen=True, slots=True)
class NonEmptyDistinct:
    """Accepts a list with at least one element and no element twice."""

    def __call__(self, value: object) -> None:
        if not isinstance(value, tuple) or not value:
            raise ValueError("must name at least one entry")
        if len(set(value)) != len(value):
            raise ValueError("must not name the same entry twice")

    def __str__(self) -> str:
        return "non-empty list without duplicates"


@dataclass(frozen=True, slots=True)
class NonEmptyString:
    """Kafka's ConfigDef.NonEmptyString: a string with something besides whitespace."""

    def __call__(self, value: object) -> None:
        if not isinstance(value, str) or not value.strip():
            raise ValueError("must not be empty")

    def __str__(self) -> str:
        return "non-empty string"


def at_least(minimum: float) -> AtLeast:
    return AtLeast(minimum)


def in_range(low: float, high: float) -> InRange:
    return InRange(low, high)


def one_of(*choices: str) -> OneOf:
    return OneOf(choices)


def list_of(element: Validator) -> ListOf:
    return ListOf(element)


def non_empty_distinct() -> NonEmptyDistinct:
    return NonEmptyDistinct()


def non_empty_string() -> NonEmptyString:
    return NonEmptyString()


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


# --- the definition record ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConfigDef:
    """One config key. Invariant: `default` is None or already of `type`'s Python form
    (bool, str, int, float, tuple[str, ...]) and passes `validator`.

    `synonyms` (topic keys only) are the broker keys that supply the topic default, in
    Kafka's order of precedence. `aliases` are other spellings of a broker key (broker.id
    for node.id). `unsupported`, when not empty, says why Tiercel accepts only the
    default: a Kafka key a user may carry over is refused rather than silently ignored.
    Immutable; any thread.
    """

    name: str
    type: ConfigType
    default: object
    validator: Validator | None
    doc: str
    synonyms: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    unsupported: str = ""
