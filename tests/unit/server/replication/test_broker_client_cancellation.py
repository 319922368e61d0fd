"""A BrokerClient request cancelled just as its connection attempt fails must end
cancelled. Python 3.11's asyncio.wait_for returned the inner failure instead, dropping
the cancellation, so a stopped replica fetcher carried on backing off and retrying for
ever and the broker's shutdown waited for it."""

from __future__ import annotations

import asyncio

import pytest

from tiercel.server.replication.broker_client import BrokerClient


@pytest.mark.parametrize("yields", range(6))
async def test_a_cancelled_request_ends_cancelled(yields: int) -> None:
    # No endpoint: the connection attempt fails on its first step. Cancelling after
    # each number of loop iterations hits every point of the request, among them the
    # one where the attempt has failed and the request has not resumed yet.
    client = BrokerClient(2, lambda: None, "test", 5.0)
    request = asyncio.create_task(client.request(18, (0, 3), {}))
    for _ in range(yields):
        await asyncio.sleep(0)
    if request.done():
        return  # failed before the cancellation: nothing was dropped
    request.cancel()
    with pytest.raises(asyncio.CancelledError):
        await request
