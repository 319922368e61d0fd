"""LogDirFailureChannel: where storage reports a log directory whose I/O failed.

Kafka's ``LogDirFailureChannel`` and ``LocalLog.maybeHandleIOException``. Any I/O error
in a log operation (append, roll, flush/fsync, checkpoint write) marks the log dir that
holds the files offline, once, and surfaces as KafkaStorageError. A dir never comes back
while the broker runs: after a failed fsync the kernel may have dropped the dirty pages
and a later fsync can succeed over them, so nothing written there may be trusted again
(no recovery point may move past the failure). The broker's failure handler takes each
offline dir from the channel and takes its partitions offline.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Final

from tiercel.config.logging_setup import log_event
from tiercel.protocol.errors import KafkaStorageError

_log: Final = logging.getLogger("tiercel.log_dir_failure")


class LogDirFailureChannel:
    """The set of offline log dirs and the queue of those not yet handled.

    Thread-safe: storage reports failures from the event loop and from executor
    threads; `take_next_offline_log_dir` is awaited on one event loop. A dir enters the
    set and the queue at most once (Kafka's maybeAddOfflineLogDir)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offline: set[str] = set()
        self._queue: collections.deque[str] = collections.deque()
        self._waiter: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None

    def has_offline_log_dir(self, log_dir: str) -> bool:
        return log_dir in self._offline

    def maybe_add_offline_log_dir(self, log_dir: str, message: str, error: BaseException) -> bool:
        """Mark ``log_dir`` offline; True the first time only."""
        with self._lock:
            if log_dir in self._offline:
                return False
            self._offline.add(log_dir)
            self._queue.append(log_dir)
            waiter = self._waiter
        log_event(
            _log, logging.ERROR, "log_dir_failed", dir=log_dir, reason=f"{message}: {error!r}"
        )
        if waiter is not None:
            loop, event = waiter
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
                loop.call_soon_threadsafe(event.set)
        return True

    async def take_next_offline_log_dir(self) -> str:
        """The next dir that went offline, waiting for one (event loop)."""
        loop = asyncio.get_running_loop()
        while True:
            with self._lock:
                if self._queue:
                    return self._queue.popleft()
                event = asyncio.Event()
                self._waiter = (loop, event)
            await event.wait()


def io_error_of(error: BaseException) -> OSError | None:
    """The OSError behind a storage failure: ``error`` itself, or the cause of the
    KafkaStorageError a segment, index or checkpoint file raised for it. None for
    failures that are not I/O (a corrupt index, a segment closed under a reader)."""
    if isinstance(error, OSError):
        return error
    if isinstance(error, KafkaStorageError) and isinstance(error.__cause__, OSError):
        return error.__cause__
    return None


def check_log_dir_online(channel: LogDirFailureChannel, log_dir: str) -> None:
    """KafkaStorageError if ``log_dir`` is offline: nothing may touch it again."""
    if channel.has_offline_log_dir(log_dir):
        raise KafkaStorageError(
            f"The log dir {log_dir} is already offline due to a previous IO exception."
        )


def io_failure(
    channel: LogDirFailureChannel, log_dir: str, message: str, error: Exception, deleted: bool
) -> Exception:
    """What to raise for ``error`` from an operation in ``log_dir``: an I/O error takes
    the dir offline and becomes a KafkaStorageError; anything else, or an error once the
    log was ``deleted`` (its directory renamed away under a write: not the disk's), is
    ``error`` itself."""
    cause = io_error_of(error)
    if cause is None or deleted:
        return error
    channel.maybe_add_offline_log_dir(log_dir, message, cause)
    if isinstance(error, KafkaStorageError):
        return error
    failure = KafkaStorageError(f"{message}: {cause}")
    failure.__cause__ = error
    return failure


@contextlib.contextmanager
def maybe_handle_io_exception(
    channel: LogDirFailureChannel,
    log_dir: str,
    message: str,
    deleted: Callable[[], bool] = lambda: False,
) -> Iterator[None]:
    """Kafka's maybeHandleIOException: refuse to touch an offline dir, and raise what
    `io_failure` says for an error inside the block."""
    check_log_dir_online(channel, log_dir)
    try:
        yield
    except Exception as e:
        failure = io_failure(channel, log_dir, message, e, deleted())
        if failure is e:
            raise
        raise failure from e
