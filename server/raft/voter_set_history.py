"""The voter set as of each offset of the metadata log (Kafka's ``VoterSetHistory``):
VotersRecord values by offset over the static voter set of the configuration."""

from __future__ import annotations

from tiercel.server.raft.log_history import LogHistory, LogHistoryEntry
from tiercel.server.raft.voter_set import VoterSet

__all__ = ["VoterSetHistory"]


class VoterSetHistory:
    """Invariant: two successive voter sets from the replicated log (offset >= 0) have an
    overlapping majority. Event-loop only."""

    def __init__(self, static_voter_set: VoterSet) -> None:
        self._static_voter_set = static_voter_set
        self._history: LogHistory[VoterSet] = LogHistory()

    def add_at(self, offset: int, voters: VoterSet) -> None:
        """ValueError if the last set came from the log and the new one does not share a
        majority with it. The bootstrap checkpoint's set (offset -1) is not checked: it
        comes from the format command, not from a leader (Kafka's VoterSetHistory.addAt)."""
        last = self._history.last_entry()
        if (
            last is not None
            and last.offset >= 0
            and not last.value.has_overlapping_majority(voters)
        ):
            raise ValueError(
                f"Last voter set {last.value} doesn't have an overlapping majority with the "
                f"new voter set {voters}"
            )
        self._history.add_at(offset, voters)

    def value_at_or_before(self, offset: int) -> VoterSet | None:
        return self._history.value_at_or_before(offset)

    def last_value(self) -> VoterSet:
        last = self._history.last_entry()
        return self._static_voter_set if last is None else last.value

    def last_entry(self) -> LogHistoryEntry[VoterSet] | None:
        return self._history.last_entry()

    def truncate_new_entries(self, end_offset: int) -> None:
        self._history.truncate_new_entries(end_offset)

    def truncate_old_entries(self, start_offset: int) -> None:
        self._history.truncate_old_entries(start_offset)

    def clear(self) -> None:
        self._history.clear()
