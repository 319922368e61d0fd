"""DaemonThreadPoolExecutor: calls run in daemon threads, `join` waits with a timeout,
and a shutdown cancels what is queued without waiting for a stuck call."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from tiercel.tiered.daemon_thread_pool import DaemonThreadPoolExecutor


def test_calls_run_in_daemon_threads_up_to_the_bound() -> None:
    pool = DaemonThreadPoolExecutor(2, "test-pool")
    futures = [pool.submit(lambda: threading.current_thread()) for _ in range(5)]
    threads = {f.result(5) for f in futures}
    assert all(t.daemon and t.name.startswith("test-pool_") for t in threads)
    assert len(threads) <= 2
    assert pool.submit(lambda x: x * 2, 21).result(5) == 42
    failing = pool.submit(lambda: 1 // 0)
    with pytest.raises(ZeroDivisionError):
        failing.result(5)
    pool.shutdown()
    with pytest.raises(RuntimeError):
        pool.submit(lambda: None)


def test_a_stuck_call_holds_neither_join_nor_shutdown() -> None:
    release = threading.Event()
    pool = DaemonThreadPoolExecutor(1, "stuck")
    stuck = pool.submit(release.wait)
    queued = pool.submit(lambda: "never")
    assert not pool.join(0.1)
    pool.shutdown(wait=False, cancel_futures=True)
    assert queued.cancelled()
    assert not pool.join(0.1)  # the running call is not cut short
    release.set()
    assert pool.join(5)
    assert stuck.result(5) is True
    assert queued.done()


@pytest.mark.skipif(sys.platform != "linux", reason="per-thread nice values are Linux's")
def test_a_background_pool_runs_its_threads_at_its_nice_value_and_no_other_thread() -> None:
    def own_nice() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    caller = own_nice()
    background = DaemonThreadPoolExecutor(1, "background", nice=caller + 5)
    plain = DaemonThreadPoolExecutor(1, "plain")
    try:
        assert background.submit(own_nice).result(5) == caller + 5
        assert plain.submit(own_nice).result(5) == caller
        assert own_nice() == caller
    finally:
        background.shutdown()
        plain.shutdown()


def test_a_refused_priority_change_still_leaves_a_working_pool(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(*_: object) -> None:
        raise PermissionError("setpriority refused by the sandbox")

    monkeypatch.setattr(os, "setpriority", refuse)
    pool = DaemonThreadPoolExecutor(1, "refused", nice=10)
    try:
        assert pool.submit(lambda: 42).result(5) == 42
    finally:
        pool.shutdown(wait=False)
