"""The ZooKeeper session outlives a stalled event loop.

kazoo pings from its own connection thread (see server/metadata/zk_client.py), so a loop
that does not run for longer than the session timeout — a slow callback, a blocking
call — does not make the broker look dead. Runs against the shared real ZooKeeper
(tickTime 250 ms) with a 1 s session timeout.
"""

from __future__ import annotations

import time

from tiercel.server.metadata.zk_store import ZooKeeperMetadataStore

SESSION_TIMEOUT_MS = 1000


def _busy(seconds: float) -> None:
    """Python code that never yields to the loop (it gives the GIL up, as all does)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


async def test_a_stalled_event_loop_keeps_the_session(zk_connect: str) -> None:
    store = ZooKeeperMetadataStore(zk_connect, session_timeout_ms=SESSION_TIMEOUT_MS)
    await store.start()
    try:
        await store.create("/registration", ephemeral=True)
        session = store.session_id
        time.sleep(2 * SESSION_TIMEOUT_MS / 1000)
        _busy(2 * SESSION_TIMEOUT_MS / 1000)
        stat = await store.exists("/registration")
        assert stat is not None
        assert stat.ephemeral_owner == session == store.session_id
    finally:
        await store.close()
