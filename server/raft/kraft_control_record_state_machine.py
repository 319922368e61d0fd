"""The KRaft control records of the metadata partition as state (Kafka's
``KRaftControlRecordStateMachine``): the voter set and kraft.version as of every offset,
read from the latest snapshot (the bootstrap checkpoint 0-0 included) and from the
KRaftVersionRecord and VotersRecord control records of the log, uncommitted ones too
(Raft reconfiguration takes effect when a record is appended, not when it commits).

The Raft client calls `update_state` after every append and snapshot download,
`truncate_new_entries` when the log is truncated (a rolled-back VotersRecord stops
counting) and `truncate_old_entries` when a snapshot replaces the log's prefix.

Only control batches are decoded: a data batch is skipped on its header, so replaying
the metadata log costs nothing per metadata record.
"""

from __future__ import annotations

import logging
from typing import Final

from tiercel.protocol.record_batch import iter_batches
from tiercel.server.raft.batch import Batch
from tiercel.server.raft.control_record import ControlRecordType
from tiercel.server.raft.log_history import LogHistory, LogHistoryEntry
from tiercel.server.raft.record_serde import IdentitySerde
from tiercel.server.raft.records_iterator import decode_batch
from tiercel.server.raft.records_snapshot import RecordsSnapshotReader
from tiercel.server.raft.replicated_log import Isolation, ReplicatedLog
from tiercel.server.raft.voter_set import VoterSet
from tiercel.server.raft.voter_set_history import VoterSetHistory

__all__ = ["KRaftControlRecordStateMachine"]

_log: Final = logging.getLogger("tiercel.raft")
_STARTING_NEXT_OFFSET: Final = -1
_SERDE: Final = IdentitySerde()
KRAFT_VERSION_0: Final = 0


class KRaftControlRecordStateMachine:
    """Invariant: the histories hold exactly the control records below ``next_offset``
    (of the snapshot, then of the log). Event-loop only (the Raft client's poll)."""

    def __init__(self, static_voter_set: VoterSet, log: ReplicatedLog) -> None:
        self._log = log
        self._voter_set_history = VoterSetHistory(static_voter_set)
        self._kraft_version_history: LogHistory[int] = LogHistory()
        self._next_offset = _STARTING_NEXT_OFFSET

    def update_state(self) -> None:
        self._maybe_load_snapshot()
        self._maybe_load_log()

    def truncate_new_entries(self, end_offset: int) -> None:
        self._voter_set_history.truncate_new_entries(end_offset)
        self._kraft_version_history.truncate_new_entries(end_offset)
        # The records from end_offset on are gone; whatever replaces them is read anew.
        self._next_offset = min(self._next_offset, end_offset)

    def truncate_old_entries(self, start_offset: int) -> None:
        self._voter_set_history.truncate_old_entries(start_offset)
        self._kraft_version_history.truncate_old_entries(start_offset)

    def last_voter_set(self) -> VoterSet:
        return self._voter_set_history.last_value()

    def last_voter_set_entry(self) -> LogHistoryEntry[VoterSet] | None:
        """The last VotersRecord and its offset; None when the voters are the static ones."""
        return self._voter_set_history.last_entry()

    def last_kraft_version(self) -> int:
        last = self._kraft_version_history.last_entry()
        return KRAFT_VERSION_0 if last is None else last.value

    def voter_set_at_offset(self, offset: int) -> VoterSet | None:
        self._check_offset_is_valid(offset)
        return self._voter_set_history.value_at_or_before(offset)

    def kraft_version_at_offset(self, offset: int) -> int:
        self._check_offset_is_valid(offset)
        value = self._kraft_version_history.value_at_or_before(offset)
        return KRAFT_VERSION_0 if value is None else value

    def _check_offset_is_valid(self, offset: int) -> None:
        if offset >= self._next_offset:
            raise ValueError(
                f"Attempting the read a value at an offset ({offset}) which is greater than "
                f"or equal to the largest known offset ({self._next_offset - 1})"
            )

    def _maybe_load_log(self) -> None:
        while self._log.end_offset.message_offset > self._next_offset:
            records = memoryview(self._log.read(self._next_offset, Isolation.UNCOMMITTED).records)
            last_offset = None
            for position, header in iter_batches(records):
                if header.last_offset < self._next_offset:
                    continue
                if header.is_control:
                    self._handle_batch(decode_batch(records, position, header, _SERDE), None)
                last_offset = header.last_offset
                self._next_offset = last_offset + 1
            if last_offset is None:
                raise RuntimeError(
                    f"Read no batch at offset {self._next_offset} below the log end offset "
                    f"{self._log.end_offset.message_offset}"
                )

    def _maybe_load_snapshot(self) -> None:
        raw = self._log.latest_snapshot()
        behind = self._next_offset == _STARTING_NEXT_OFFSET or (
            self._next_offset < self._log.start_offset
        )
        if raw is not None and behind:
            self._kraft_version_history.clear()
            self._voter_set_history.clear()
            reader = RecordsSnapshotReader(raw, _SERDE)
            _log.info(
                "loading the KRaft control records of snapshot %s (log start offset %d, next "
                "offset %d)",
                reader.snapshot_id,
                self._log.start_offset,
                self._next_offset,
            )
            for batch in reader:
                # Kafka's RecordsSnapshotWriter puts the KRaftVersionRecord and the
                # VotersRecord in the header's batch; the data batches that follow hold
                # metadata records only, so the first of them ends the search.
                if not batch.control_records:
                    break
                self._handle_batch(batch, reader.last_contained_log_offset)
            self._next_offset = reader.last_contained_log_offset + 1
        elif self._next_offset == _STARTING_NEXT_OFFSET:
            self._next_offset = 0

    def _handle_batch(self, batch: Batch[bytes], override_offset: int | None) -> None:
        for delta, record in enumerate(batch.control_records):
            offset = batch.base_offset + delta if override_offset is None else override_offset
            if record.type is ControlRecordType.KRAFT_VOTERS:
                voters = VoterSet.from_voters_record(record.message)
                _log.info("latest set of voters is %s at offset %d", voters, offset)
                self._voter_set_history.add_at(offset, voters)
            elif record.type is ControlRecordType.KRAFT_VERSION:
                level = int(record.message.k_raft_version)
                _log.info("latest kraft.version is %d at offset %d", level, offset)
                self._kraft_version_history.add_at(offset, level)
