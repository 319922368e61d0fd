"""What a UnifiedLog knows of its remote tier (Kafka's UnifiedLog.remoteLogEnabled and
highestOffsetInRemoteStorage, KIP-405).

The log itself never talks to the remote tier (``storage`` has no network): the broker
tells it whether tiering is on for it (broker ``remote.log.storage.system.enable``, topic
``remote.storage.enable``, not an internal topic) and the RemoteLogManager how far its
copies reached. While tiering is off everything behaves as without a remote tier.
Event-loop only.
"""

from __future__ import annotations

__all__ = ["RemoteLogState"]


class RemoteLogState:
    """Invariant: ``highest_offset_in_remote_storage`` is -1 or the last offset of the
    highest segment copied, and only grows while tiering is on."""

    # Defaults until set: tiering off, nothing remote (immutable, so shared safely).
    _remote_log_enabled: bool = False
    _highest_offset_in_remote_storage: int = -1

    @property
    def remote_log_enabled(self) -> bool:
        return self._remote_log_enabled

    def set_remote_log_enabled(self, flag: bool) -> None:
        self._remote_log_enabled = flag

    @property
    def highest_offset_in_remote_storage(self) -> int:
        """The highest offset copied to the remote tier, -1 while none is."""
        return self._highest_offset_in_remote_storage

    def update_highest_offset_in_remote_storage(self, offset: int) -> None:
        """Only forward, and only while tiering is on (Kafka ignores it otherwise)."""
        if self._remote_log_enabled and offset > self._highest_offset_in_remote_storage:
            self._highest_offset_in_remote_storage = offset
