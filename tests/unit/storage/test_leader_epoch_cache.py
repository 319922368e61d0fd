import itertools
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from tiercel.protocol.errors import KafkaStorageError
from tiercel.storage.checkpoint_file import CorruptCheckpointError, LeaderEpochCheckpointFile
from tiercel.storage.leader_epoch_cache import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEntry,
    LeaderEpochFileCache,
)
from tiercel.storage.topic_partition import TopicPartition

TP = TopicPartition("orders", 0)


def cache_with(*entries: tuple[int, int], path: Path | None = None) -> LeaderEpochFileCache:
    cache = LeaderEpochFileCache(TP, LeaderEpochCheckpointFile(path) if path else None)
    for epoch, start in entries:
        assert cache.assign(epoch, start)
    return cache


def pairs(cache: LeaderEpochFileCache) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in cache.entries]


# -- end_offset_for ---------------------------------------------------------------------


def test_seed_example_returns_floor_epoch_and_next_start() -> None:
    cache = cache_with((2, 30), (3, 50), (4, 70))
    assert cache.end_offset_for(2, log_end_offset=90) == (2, 50)
    assert cache.end_offset_for(3, log_end_offset=90) == (3, 70)


def test_latest_epoch_ends_at_the_log_end_offset() -> None:
    cache = cache_with((2, 30), (4, 70))
    assert cache.end_offset_for(4, log_end_offset=90) == (4, 90)


def test_gap_epoch_answers_with_the_largest_epoch_below_it() -> None:
    cache = cache_with((2, 30), (4, 70), (6, 80))
    assert cache.end_offset_for(3, log_end_offset=90) == (2, 70)
    assert cache.end_offset_for(5, log_end_offset=90) == (4, 80)


def test_epoch_older_than_all_entries_answers_with_first_start_offset() -> None:
    cache = cache_with((2, 30), (4, 70))
    assert cache.end_offset_for(1, log_end_offset=90) == (1, 30)


def test_undefined_or_unknown_higher_epochs_are_undefined() -> None:
    cache = cache_with((2, 30), (4, 70))
    undefined = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
    assert cache.end_offset_for(UNDEFINED_EPOCH, log_end_offset=90) == undefined
    assert cache.end_offset_for(5, log_end_offset=90) == undefined
    assert cache_with().end_offset_for(0, log_end_offset=90) == undefined


# -- assign -----------------------------------------------------------------------------


def test_assign_ignores_the_current_epoch_at_a_later_offset() -> None:
    cache = cache_with((2, 30))
    cache.flush()
    assert cache.assign(2, 30) is False
    assert cache.assign(2, 45) is False
    assert pairs(cache) == [(2, 30)]
    assert not cache.is_dirty


def test_assign_of_current_epoch_at_a_lower_offset_replaces_it() -> None:
    cache = cache_with((1, 10), (2, 30))
    assert cache.assign(2, 20) is True
    assert pairs(cache) == [(1, 10), (2, 20)]


def test_assign_drops_entries_made_non_monotonic() -> None:
    cache = cache_with((1, 10), (2, 30), (4, 50))
    # A lower epoch truncates the later epochs (the log diverged and was rewritten).
    assert cache.assign(3, 40) is True
    assert pairs(cache) == [(1, 10), (2, 30), (3, 40)]
    # A higher epoch at a lower offset drops every entry starting at or after that offset.
    assert cache.assign(5, 30) is True
    assert pairs(cache) == [(1, 10), (5, 30)]


@pytest.mark.parametrize(("epoch", "start"), [(-1, 0), (0, -1)])
def test_assign_rejects_negative_values(epoch: int, start: int) -> None:
    with pytest.raises(ValueError):
        cache_with().assign(epoch, start)


def test_accessors() -> None:
    empty = cache_with()
    assert empty.latest_epoch is None
    assert empty.previous_epoch() is None
    cache = cache_with((2, 30), (3, 50), (4, 70))
    assert cache.latest_epoch == 4
    assert cache.previous_epoch() == 3
    assert cache_with((2, 30)).previous_epoch() is None


def test_epoch_for_offset() -> None:
    cache = cache_with((2, 30), (3, 50), (4, 70))
    assert cache.epoch_for_offset(29) is None
    assert cache.epoch_for_offset(30) == 2
    assert cache.epoch_for_offset(49) == 2
    assert cache.epoch_for_offset(50) == 3
    assert cache.epoch_for_offset(10**12) == 4


# -- truncation -------------------------------------------------------------------------


def test_truncate_from_end_removes_entries_starting_at_or_after() -> None:
    cache = cache_with((2, 30), (3, 50), (4, 70))
    cache.truncate_from_end(71)
    assert pairs(cache) == [(2, 30), (3, 50), (4, 70)]
    cache.truncate_from_end(50)
    assert pairs(cache) == [(2, 30)]
    cache.truncate_from_end(-1)
    assert pairs(cache) == [(2, 30)]


def test_truncate_from_start_keeps_the_covering_epoch_at_the_new_start() -> None:
    cache = cache_with((2, 30), (3, 50), (4, 70))
    cache.truncate_from_start(29)
    assert pairs(cache) == [(2, 30), (3, 50), (4, 70)]
    cache.truncate_from_start(60)
    assert pairs(cache) == [(3, 60), (4, 70)]
    # Exclusive: an entry starting exactly at the new start survives unchanged.
    cache.truncate_from_start(70)
    assert pairs(cache) == [(4, 70)]
    cache.truncate_from_start(100)
    assert pairs(cache) == [(4, 100)]


def test_epoch_entries_in_range_clips_without_changing_the_cache() -> None:
    cache = cache_with((2, 30), (3, 50), (4, 70))
    assert cache.epoch_entries_in_range(40, 70) == [EpochEntry(2, 40), EpochEntry(3, 50)]
    assert cache.epoch_entries_in_range(-1, 60) == [EpochEntry(2, 30), EpochEntry(3, 50)]
    assert pairs(cache) == [(2, 30), (3, 50), (4, 70)]


def test_clear() -> None:
    cache = cache_with((2, 30))
    cache.clear()
    assert cache.entries == ()
    assert cache.latest_epoch is None


# -- persistence ------------------------------------------------------------------------


def test_mutations_only_change_memory_until_flush(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    cache = cache_with((2, 30), (3, 50), path=path)
    assert not path.exists()
    assert cache.is_dirty
    assert cache.flush() is True
    assert path.read_bytes() == b"0\n2\n2 30\n3 50\n"
    assert not cache.is_dirty
    assert cache.flush() is False

    cache.truncate_from_end(50)
    assert cache.is_dirty
    assert path.read_bytes() == b"0\n2\n2 30\n3 50\n"
    cache.flush()
    assert LeaderEpochFileCache(TP, LeaderEpochCheckpointFile(path)).entries == (EpochEntry(2, 30),)


def test_noop_mutations_do_not_dirty(tmp_path: Path) -> None:
    cache = cache_with((2, 30), (3, 50), path=tmp_path / "leader-epoch-checkpoint")
    cache.flush()
    cache.truncate_from_end(60)
    cache.truncate_from_start(30)
    cache.assign(3, 55)
    assert not cache.is_dirty


def test_loading_is_clean_and_sanitises_non_monotonic_files(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_bytes(b"0\n2\n1 10\n2 20\n")
    clean = LeaderEpochFileCache(TP, LeaderEpochCheckpointFile(path))
    assert pairs(clean) == [(1, 10), (2, 20)]
    assert not clean.is_dirty
    # Entries are assigned in order, as Kafka loads them: (2, 5) drops both earlier ones.
    path.write_bytes(b"0\n3\n1 10\n3 20\n2 5\n")
    sanitised = LeaderEpochFileCache(TP, LeaderEpochCheckpointFile(path))
    assert pairs(sanitised) == [(2, 5)]
    assert sanitised.is_dirty


def test_negative_entries_in_the_file_are_corruption(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_bytes(b"0\n2\n1 10\n-1 20\n")
    with pytest.raises(CorruptCheckpointError) as raised:
        LeaderEpochFileCache(TP, LeaderEpochCheckpointFile(path))
    assert raised.value.line_number == 4


def test_a_mutation_racing_a_flush_leaves_the_cache_dirty(tmp_path: Path) -> None:
    cache: LeaderEpochFileCache

    class RacingCheckpoint(LeaderEpochCheckpointFile):
        def write_if_dir_exists(self, entries: Sequence[EpochEntry]) -> bool:
            cache.assign(9, 900)  # the loop mutates while the executor writes
            return super().write_if_dir_exists(entries)

    path = tmp_path / "leader-epoch-checkpoint"
    cache = LeaderEpochFileCache(TP, RacingCheckpoint(path))
    cache.assign(1, 10)
    assert cache.flush() is True
    assert path.read_bytes() == b"0\n1\n1 10\n"
    assert cache.is_dirty
    assert cache.flush() is True
    assert path.read_bytes() == b"0\n2\n1 10\n9 900\n"


def test_a_failed_flush_stays_dirty_and_a_removed_directory_is_skipped(tmp_path: Path) -> None:
    directory = tmp_path / "orders-0"
    directory.mkdir()
    cache = cache_with((1, 10), path=directory / "leader-epoch-checkpoint")
    shutil.rmtree(directory)
    assert cache.flush() is False
    assert not cache.is_dirty
    blocked = cache_with((1, 10), path=tmp_path / "leader-epoch-checkpoint")
    (tmp_path / "leader-epoch-checkpoint").mkdir()  # the rename onto it fails
    with pytest.raises(KafkaStorageError):
        blocked.flush()
    assert blocked.is_dirty


def test_without_a_checkpoint_flush_writes_nothing() -> None:
    cache = cache_with((1, 10))
    assert cache.flush() is False
    assert not cache.is_dirty


# -- model-based property test ------------------------------------------------------------


class Model:
    """A deliberately naive restatement of Kafka's semantics on a plain list."""

    def __init__(self) -> None:
        self.entries: list[tuple[int, int]] = []

    def assign(self, epoch: int, start: int) -> bool:
        if self.entries and self.entries[-1][0] == epoch and start >= self.entries[-1][1]:
            return False
        self.entries = [(e, s) for e, s in self.entries if e < epoch and s < start]
        self.entries.append((epoch, start))
        return True

    def truncate_from_end(self, end: int) -> None:
        if end >= 0:
            self.entries = [(e, s) for e, s in self.entries if s < end]

    def truncate_from_start(self, start: int) -> None:
        below = [(e, s) for e, s in self.entries if s <= start]
        if below:
            rest = [(e, s) for e, s in self.entries if s > start]
            self.entries = [(below[-1][0], start), *rest]

    def end_offset_for(self, epoch: int, leo: int) -> tuple[int, int]:
        if epoch == -1:
            return (-1, -1)
        if self.entries and self.entries[-1][0] == epoch:
            return (epoch, leo)
        higher = [s for e, s in self.entries if e > epoch]
        if not higher:
            return (-1, -1)
        floor = [e for e, _ in self.entries if e <= epoch]
        return (floor[-1] if floor else epoch, higher[0])

    def epoch_for_offset(self, offset: int) -> int | None:
        covering = [e for e, s in self.entries if s <= offset]
        return covering[-1] if covering else None


epochs = st.integers(min_value=0, max_value=12)
start_offsets = st.integers(min_value=0, max_value=120)
# -1 often: negative offsets are special cases of the truncations
any_offsets = st.one_of(st.just(-1), st.integers(min_value=-2, max_value=130))


class LeaderEpochCacheMachine(RuleBasedStateMachine):
    @initialize()
    def setup(self) -> None:
        self.dir = tempfile.mkdtemp()
        self.path = os.path.join(self.dir, "leader-epoch-checkpoint")
        self.cache = LeaderEpochFileCache(TP, LeaderEpochCheckpointFile(self.path))
        self.model = Model()

    def teardown(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(epoch=epochs, start=start_offsets)
    def assign(self, epoch: int, start: int) -> None:
        assert self.cache.assign(epoch, start) == self.model.assign(epoch, start)

    @precondition(lambda self: self.model.entries)
    @rule(data=st.data())
    def assign_next_epoch_of_a_leader(self, data: st.DataObject) -> None:
        latest_epoch, latest_start = self.model.entries[-1]
        start = data.draw(st.integers(latest_start, latest_start + 20))
        assert self.cache.assign(latest_epoch + 1, start) == self.model.assign(
            latest_epoch + 1, start
        )

    @rule(end=any_offsets)
    def truncate_from_end(self, end: int) -> None:
        self.cache.truncate_from_end(end)
        self.model.truncate_from_end(end)

    @rule(start=any_offsets)
    def truncate_from_start(self, start: int) -> None:
        self.cache.truncate_from_start(start)
        self.model.truncate_from_start(start)

    @rule()
    def clear(self) -> None:
        self.cache.clear()
        self.model.entries = []

    @rule(epoch=st.integers(min_value=-1, max_value=14), leo=st.integers(0, 200))
    def end_offset_for(self, epoch: int, leo: int) -> None:
        assert self.cache.end_offset_for(epoch, leo) == self.model.end_offset_for(epoch, leo)

    @rule(offset=any_offsets)
    def epoch_for_offset(self, offset: int) -> None:
        assert self.cache.epoch_for_offset(offset) == self.model.epoch_for_offset(offset)

    @rule()
    def flush_and_reload(self) -> None:
        self.cache.flush()
        assert not self.cache.is_dirty
        reloaded = LeaderEpochFileCache(TP, LeaderEpochCheckpointFile(self.path))
        assert reloaded.entries == self.cache.entries
        assert not reloaded.is_dirty

    @invariant()
    def matches_model(self) -> None:
        assert pairs(self.cache) == self.model.entries

    @invariant()
    def strictly_increasing_in_epoch_and_offset(self) -> None:
        entries = self.cache.entries
        for earlier, later in itertools.pairwise(entries):
            assert earlier.epoch < later.epoch
            assert earlier.start_offset < later.start_offset


LeaderEpochCacheMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=30, deadline=None
)
TestLeaderEpochCache = LeaderEpochCacheMachine.TestCase
