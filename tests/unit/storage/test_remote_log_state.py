"""A log's view of its remote tier (Kafka's UnifiedLog.remoteLogEnabled and
updateHighestOffsetInRemoteStorage): off by default, the highest remote offset only
moves forward and only while tiering is on."""

from __future__ import annotations

from tiercel.storage.remote_log_state import RemoteLogState


def test_the_highest_remote_offset_moves_forward_while_tiering_is_on() -> None:
    state = RemoteLogState()
    assert (state.remote_log_enabled, state.highest_offset_in_remote_storage) == (False, -1)
    state.update_highest_offset_in_remote_storage(10)
    assert state.highest_offset_in_remote_storage == -1  # ignored: tiering is off
    state.set_remote_log_enabled(True)
    state.update_highest_offset_in_remote_storage(10)
    state.update_highest_offset_in_remote_storage(7)
    assert state.highest_offset_in_remote_storage == 10
