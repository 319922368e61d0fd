"""The broker's (and controller's) reader of the metadata log: it replays committed
records into a `MetadataDelta` and publishes each new `MetadataImage` to the publishers
(Kafka's org.apache.kafka.image.loader.MetadataLoader and MetadataBatchLoader).

It is the Raft client's listener. Records of a metadata transaction (Begin, End,
AbortTransactionRecord, KIP-868) are held back until the transaction ends and dropped
if it aborts. Nothing is published while the loader is still catching up with the
high watermark it first learned of (Kafka's stillNeedToCatchUp), so a starting broker
never acts on a half-replayed log; after that, every commit publishes. Publishers run
one image at a time, in log order, on a task of their own (the Raft client's poll must
not wait for a replica manager); `last_applied_offset` is the offset of the last image
every publisher has taken, which the broker's heartbeats report.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Final, Protocol

from tiercel.config.logging_setup import log_event
from tiercel.protocol.metadata.log_control_records import (
    AbortTransactionRecord,
    BeginTransactionRecord,
    EndTransactionRecord,
)
from tiercel.protocol.metadata.message_schema import MetadataRecord
from tiercel.protocol.metadata.metadata_record_serde import ApiMessageAndVersion
from tiercel.server.metadata.image.errors import MetadataReplayError
from tiercel.server.metadata.image.metadata_delta import MetadataDelta
from tiercel.server.metadata.image.metadata_image import MetadataImage
from tiercel.server.metadata.image.metadata_provenance import MetadataProvenance
from tiercel.server.raft.batch import Batch
from tiercel.server.raft.leader_and_epoch import UNKNOWN_LEADER_AND_EPOCH, LeaderAndEpoch
from tiercel.server.raft.raft_client_listener import BatchReader
from tiercel.server.raft.records_snapshot import SnapshotReader

__all__ = ["MetadataLoader", "MetadataPublisher"]

_log: Final = logging.getLogger("tiercel.metadata.loader")


class MetadataPublisher(Protocol):
    """Takes each new image, with the delta that made it (Kafka's MetadataPublisher)."""

    @property
    def name(self) -> str: ...

    async def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage) -> None: ...


class MetadataLoader:
    """Event-loop only. Invariants: ``image`` is the last image handed to the
    publishers; ``_delta`` holds what was replayed after it; ``_transaction`` the records
    of an open metadata transaction, not yet in ``_delta``."""

    def __init__(self, node_id: int, high_watermark: Callable[[], int | None]) -> None:
        self._node_id = node_id
        self._high_watermark = high_watermark
        self.image = MetadataImage.EMPTY
        self.last_applied_offset = -1
        self.leader_and_epoch = UNKNOWN_LEADER_AND_EPOCH
        self._delta = MetadataDelta(self.image)
        self._provenance = MetadataProvenance.EMPTY
        self._transaction: list[MetadataRecord] | None = None
        self._catching_up = True
        self._publishers: list[MetadataPublisher] = []
        self._queue: asyncio.Queue[tuple[MetadataDelta, MetadataImage] | None] = asyncio.Queue()
        self._task = asyncio.get_running_loop().create_task(
            self._publish_in_order(), name="metadata-publisher"
        )
        self._leader_listeners: list[Callable[[LeaderAndEpoch], None]] = []
        self._applied = asyncio.Event()

    def install_publisher(self, publisher: MetadataPublisher) -> None:
        """Add a publisher before the first image is published (every publisher sees
        every image; Kafka's loader replays the current image to a late one, which
        Tiercel's start-up never needs)."""
        if self.image.provenance.last_contained_offset >= 0:
            raise RuntimeError(f"publisher {publisher.name} installed after the first image")
        self._publishers.append(publisher)

    async def wait_until_applied(self, end_offset: int) -> None:
        """Until every publisher has taken an image of the log up to ``end_offset``
        (exclusive, as a high watermark)."""
        while self.last_applied_offset < end_offset - 1:
            await self._applied.wait()

    def add_leader_listener(self, listener: Callable[[LeaderAndEpoch], None]) -> None:
        self._leader_listeners.append(listener)

    # Raft's Listener.

    def handle_commit(self, reader: BatchReader[ApiMessageAndVersion]) -> None:
        try:
            for batch in reader:
                self._load_batch(batch)
        finally:
            reader.close()
        self._maybe_publish()

    def handle_load_snapshot(self, reader: SnapshotReader[ApiMessageAndVersion]) -> None:
        """A snapshot replaces everything: replayed on the current image (so that the
        delta says what changed), then what it does not hold is removed (Kafka's
        MetadataLoader.handleLoadSnapshot)."""
        delta = MetadataDelta(self.image)
        try:
            for batch in reader:
                for record in batch.records:
                    self._replay(delta, record.message)
            snapshot_id = reader.snapshot_id
            provenance = MetadataProvenance(
                snapshot_id.offset - 1,
                snapshot_id.epoch,
                reader.last_contained_log_timestamp,
                is_offset_batch_aligned=True,
            )
        finally:
            reader.close()
        delta.finish_snapshot()
        self._transaction = None
        self._delta = delta
        self._provenance = provenance
        log_event(
            _log,
            logging.INFO,
            "metadata_snapshot_loaded",
            node_id=self._node_id,
            offset=provenance.last_contained_offset,
            epoch=provenance.last_contained_epoch,
        )
        self._maybe_publish()

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self.leader_and_epoch = leader
        for listener in self._leader_listeners:
            listener(leader)

    def begin_shutdown(self) -> None:
        self._queue.put_nowait(None)

    async def close(self) -> None:
        self._queue.put_nowait(None)
        await asyncio.gather(self._task, return_exceptions=True)

    # Loading.

    def _load_batch(self, batch: Batch[ApiMessageAndVersion]) -> None:
        for record in batch.records:
            message = record.message
            if isinstance(message, BeginTransactionRecord):
                self._transaction = []
            elif isinstance(message, EndTransactionRecord):
                for held in self._transaction or ():
                    self._replay(self._delta, held)
                self._transaction = None
            elif isinstance(message, AbortTransactionRecord):
                self._transaction = None
            elif self._transaction is not None:
                self._transaction.append(message)
            else:
                self._replay(self._delta, message)
        self._provenance = MetadataProvenance(
            batch.last_offset,
            batch.epoch,
            batch.append_timestamp,
            is_offset_batch_aligned=self._transaction is None,
        )

    def _replay(self, delta: MetadataDelta, message: MetadataRecord) -> None:
        try:
            delta.replay(message)
        except MetadataReplayError as e:
            # Kafka's loader reports a replay fault and goes on with the next record.
            log_event(
                _log,
                logging.ERROR,
                "metadata_replay_error",
                node_id=self._node_id,
                record=type(message).__name__,
                reason=str(e),
            )

    def _maybe_publish(self) -> None:
        if self._transaction is not None:
            return
        offset = self._provenance.last_contained_offset
        if self._catching_up:
            high_watermark = self._high_watermark()
            if high_watermark is None or offset < high_watermark - 1:
                return
            self._catching_up = False
            log_event(
                _log,
                logging.INFO,
                "metadata_caught_up",
                node_id=self._node_id,
                offset=offset,
                high_watermark=high_watermark,
            )
        if offset <= self.image.provenance.last_contained_offset:
            return
        image = self._delta.apply(self._provenance)
        self._queue.put_nowait((self._delta, image))
        self.image = image
        self._delta = MetadataDelta(image)

    async def _publish_in_order(self) -> None:
        while True:
            item = await self._queue.get()
            if item is None:
                return
            delta, image = item
            for publisher in list(self._publishers):
                try:
                    await publisher.on_metadata_update(delta, image)
                except Exception as e:
                    # Kafka's metadata publishing fault: reported, and the next image
                    # is published all the same.
                    log_event(
                        _log,
                        logging.ERROR,
                        "metadata_publish_error",
                        node_id=self._node_id,
                        publisher=publisher.name,
                        offset=image.provenance.last_contained_offset,
                        reason=repr(e),
                    )
            self.last_applied_offset = max(
                self.last_applied_offset, image.provenance.last_contained_offset
            )
            self._applied.set()
            self._applied = asyncio.Event()
