"""``bootstrap.checkpoint``: the bootstrap metadata `tiercel storage format` leaves in
each directory it formats, for the first active controller to write into the empty
metadata log (Kafka's ``BootstrapDirectory`` and ``BatchFileWriter``/``BatchFileReader``).

The file has a snapshot's layout: record batches at offset 0 and epoch 0, a
SnapshotHeaderRecord control batch first, the records in data batches, a
SnapshotFooterRecord control batch last. Synchronous file I/O: the format command and a
node's start-up call it before their event loop serves anything.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Final

from tiercel.protocol.errors import CorruptRecordError
from tiercel.protocol.metadata.metadata_record_serde import (
    ApiMessageAndVersion,
    MetadataParseError,
    MetadataRecordSerde,
)
from tiercel.protocol.metadata.metadata_version import LATEST_PRODUCTION
from tiercel.server.metadata.bootstrap_metadata import BootstrapMetadata, BootstrapMetadataError
from tiercel.server.raft.batch_accumulator import BatchAccumulator
from tiercel.server.raft.metadata_log_config import MAX_BATCH_SIZE_BYTES
from tiercel.server.raft.records_iterator import iter_decoded_batches
from tiercel.server.raft.timer import SystemTime

__all__ = ["BINARY_BOOTSTRAP_FILENAME", "read_bootstrap_metadata", "write_bootstrap_file"]

BINARY_BOOTSTRAP_FILENAME: Final = "bootstrap.checkpoint"


def read_bootstrap_metadata(directory: str) -> BootstrapMetadata:
    """The bootstrap metadata of ``directory``: its file's records, or the latest
    production metadata.version alone when it has none (Kafka's
    BootstrapDirectory.read, without the inter.broker.protocol.version of ZooKeeper
    migrations). BootstrapMetadataError if the file is unreadable or corrupt."""
    if not os.path.isdir(directory):
        kind = "exists, but is not a directory" if os.path.exists(directory) else "is missing"
        raise BootstrapMetadataError(f"Path {directory} {kind}.")
    path = os.path.join(directory, BINARY_BOOTSTRAP_FILENAME)
    if not os.path.exists(path):
        return BootstrapMetadata.from_versions(LATEST_PRODUCTION, {}, "the default bootstrap")
    source = f"the binary bootstrap metadata file: {path}"
    try:
        with open(path, "rb") as f:
            data = f.read()
        records = [
            record
            for batch in iter_decoded_batches(data, MetadataRecordSerde())
            for record in batch.records
        ]
    except (OSError, CorruptRecordError, MetadataParseError) as e:
        raise BootstrapMetadataError(f"Unable to read {source}: {e}") from None
    return BootstrapMetadata.from_records(records, source)


def write_bootstrap_file(directory: str, metadata: BootstrapMetadata) -> None:
    """Write ``metadata`` as ``directory``/bootstrap.checkpoint: to a temporary file,
    fsynced, then renamed over any older one (Kafka's writeBinaryFile)."""
    path = os.path.join(directory, BINARY_BOOTSTRAP_FILENAME)
    temp_path = path + ".tmp"
    try:
        with open(temp_path, "wb") as f:
            f.write(_batch_file(metadata.records))
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp_path, path)
    finally:
        if os.path.exists(temp_path):
            os.remove(temp_path)


def _batch_file(records: Sequence[ApiMessageAndVersion]) -> bytes:
    """The batches of Kafka's BatchFileWriter: header, records, footer, all at epoch 0."""
    time = SystemTime()
    accumulator = BatchAccumulator[ApiMessageAndVersion](
        0, 0, 0, MAX_BATCH_SIZE_BYTES, 2**31 - 1, time, MetadataRecordSerde()
    )
    accumulator.append_snapshot_header_record(0, time.milliseconds())
    for record in records:
        accumulator.append(0, [record], delay_drain=False)
    accumulator.append_snapshot_footer_record(time.milliseconds())
    return b"".join(batch.data for batch in accumulator.drain())
