"""A transactional producer driven on the wire against the broker's own transaction
coordinator (FindCoordinator, InitProducerId, AddPartitionsToTxn v3, Produce v9 with
the transactional id, EndTxn): what the KIP-890 verification tests and bench send."""

from __future__ import annotations

import datetime
import time
from collections import defaultdict
from typing import Any

from kio.schema.errors import ErrorCode

from support.clients import now_ms
from support.txn_wire import request
from support.wire import WireClient
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch


class WireTxn:
    """A transactional producer driven on the wire: InitProducerId, AddPartitionsToTxn
    v3, Produce v9 with its transactional id, EndTxn."""

    def __init__(self, client: WireClient, transactional_id: str, topic: str) -> None:
        self.client = client
        self.transactional_id = transactional_id
        self.topic = topic
        self._retry(10, 3, {"key": transactional_id, "key_type": 1})  # FindCoordinator
        init = self._retry(
            22,
            4,
            {
                "transactional_id": transactional_id,
                "transaction_timeout": datetime.timedelta(seconds=60),
                "producer_id": -1,
                "producer_epoch": -1,
            },
        )
        self.producer_id, self.epoch = int(init.producer_id), int(init.producer_epoch)
        self.seq: dict[int, int] = defaultdict(int)

    def _retry(self, api_key: int, version: int, values: dict[str, Any]) -> Any:
        """A coordinator request, again while the coordinator loads or moves."""
        for _ in range(100):
            response = request(self.client, api_key, version, values)
            if response.error_code not in (
                ErrorCode.coordinator_not_available,
                ErrorCode.coordinator_load_in_progress,
                ErrorCode.not_coordinator,
                ErrorCode.concurrent_transactions,
            ):
                assert response.error_code == ErrorCode.none, response
                return response
            time.sleep(0.1)
        raise AssertionError(f"api {api_key} kept failing: {response.error_code}")

    def add(self, *partitions: int) -> ErrorCode:
        response = request(
            self.client,
            24,
            3,
            {
                "v3_and_below_transactional_id": self.transactional_id,
                "v3_and_below_producer_id": self.producer_id,
                "v3_and_below_producer_epoch": self.epoch,
                "v3_and_below_topics": [{"name": self.topic, "partitions": list(partitions)}],
            },
        )
        codes = {
            p.partition_error_code
            for t in response.results_by_topic_v3_and_below
            for p in t.results_by_partition
        }
        assert len(codes) == 1, codes
        return ErrorCode(codes.pop())

    def produce(
        self,
        partition: int,
        value: bytes,
        *,
        transactional_id: str | None = "",
        epoch: int | None = None,
    ) -> tuple[ErrorCode, int]:
        """(error, base offset) of one transactional record; "" sends this producer's
        own transactional id."""
        batch = build_record_batch(
            [SimpleRecord(b"k", value, timestamp=now_ms())],
            producer_id=self.producer_id,
            producer_epoch=self.epoch if epoch is None else epoch,
            base_sequence=self.seq[partition],
            is_transactional=True,
        )
        response = request(
            self.client,
            0,
            9,
            {
                "transactional_id": (
                    self.transactional_id if transactional_id == "" else transactional_id
                ),
                "acks": -1,
                "timeout": datetime.timedelta(seconds=10),
                "topic_data": [
                    {"name": self.topic, "partition_data": [{"index": partition, "records": batch}]}
                ],
            },
        )
        part = response.responses[0].partition_responses[0]
        if part.error_code == ErrorCode.none:
            self.seq[partition] += 1
        return ErrorCode(part.error_code), int(part.base_offset)

    def end(self, commit: bool) -> None:
        self._retry(
            26,
            3,
            {
                "transactional_id": self.transactional_id,
                "producer_id": self.producer_id,
                "producer_epoch": self.epoch,
                "committed": commit,
            },
        )
