"""Transaction verification state of a partition (KIP-890 part 1): Kafka's
`VerificationGuard` and `VerificationStateEntry`.

Before a partition leader writes the first transactional batch of a producer that has
no transaction open on the partition, it asks the transaction coordinator whether the
partition is part of the producer's ongoing transaction (AddPartitionsToTxn with
verify_only). Without that check a produce that arrives late (after its transaction
was aborted, say) would open a transaction the coordinator never heard of: no marker
would ever close it and the last stable offset would stay stuck below it for good (a
"hanging transaction").

A guard is made when the verification starts and kept in the producer state until the
append. The append must present the same guard: if a COMMIT/ABORT marker (or a first
transactional write) of the producer landed in between, the entry, and with it the
guard, was cleared, and the append fails. A fresh object per verification also defeats
the ABA case where the transaction ended and a new one started, unaware of this
partition, before the stale verification came back. `SENTINEL` never verifies.
"""

from __future__ import annotations

import itertools
from typing import Final

__all__ = ["SENTINEL", "VerificationGuard", "VerificationStateEntry"]

_ids: Final = itertools.count(1)


class VerificationGuard:
    """One verification's token; only the very same object verifies. Event-loop only."""

    __slots__ = ("value",)

    def __init__(self, value: int | None = None) -> None:
        self.value = next(_ids) if value is None else value

    def verify(self, verifying: VerificationGuard) -> bool:
        """Whether ``verifying`` (the guard an append presents) is this one."""
        return verifying is not SENTINEL and verifying.value == self.value

    def __repr__(self) -> str:
        return f"VerificationGuard(value={self.value})"


# Kafka's VerificationGuard.SENTINEL: no verification (value 0 is never issued).
SENTINEL: Final = VerificationGuard(0)


class VerificationStateEntry:
    """A producer being verified on a partition: when it started, its guard, and the
    lowest sequence (of the newest epoch) a batch waiting for verification carries.

    The lowest sequence stops an OutOfOrderSequence loop: when a lower batch's
    verification fails with a retriable error while a higher one's succeeds, writing the
    higher one would make every retry of the lower one out of order. So while the entry
    exists, a batch with a higher sequence is refused (OUT_OF_ORDER_SEQUENCE_NUMBER,
    which the producer retries) until the lower one is written."""

    __slots__ = ("epoch", "guard", "lowest_sequence", "timestamp")

    def __init__(self, timestamp: int, sequence: int, epoch: int) -> None:
        self.timestamp = timestamp
        self.guard = VerificationGuard()
        self.lowest_sequence = sequence
        self.epoch = epoch

    def maybe_update_lowest_sequence_and_epoch(self, sequence: int, epoch: int) -> None:
        """A lower sequence of the same epoch lowers the bar; a newer epoch resets it
        (sequences restart with an epoch bump)."""
        if epoch == self.epoch and sequence < self.lowest_sequence:
            self.lowest_sequence = sequence
        if epoch > self.epoch:
            self.epoch = epoch
            self.lowest_sequence = sequence
