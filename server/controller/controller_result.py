"""What a control manager's command produces (Kafka's ``ControllerResult``): the records
to append and the reply to send once they are committed. A command never changes state;
its records do, when they are replayed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from tiercel.protocol.metadata.metadata_record_serde import ApiMessageAndVersion

__all__ = ["ControllerResult"]

T_co = TypeVar("T_co", covariant=True)


@dataclass(frozen=True, slots=True)
class ControllerResult(Generic[T_co]):
    """``records`` are appended in one batch, all or none (Kafka's ``atomicOf``; every
    command here is atomic). A value; safe anywhere."""

    records: Sequence[ApiMessageAndVersion]
    response: T_co
