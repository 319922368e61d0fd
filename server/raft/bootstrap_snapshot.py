"""The bootstrap snapshot of a dynamic quorum (KIP-853), written by ``tiercel storage
format --standalone`` or ``--initial-controllers`` into the metadata partition's
directory (Kafka's Formatter.writeDynamicQuorumSnapshot):

    __cluster_metadata-0/00000000000000000000-0000000000.checkpoint
      offset 0  control batch, epoch 0: SnapshotHeaderRecord, KRaftVersionRecord,
                                        VotersRecord (the initial voters)
      offset 3  control batch, epoch 0: SnapshotFooterRecord

Snapshot 0-0 contains no log record (its last contained offset is -1), so the voters
it names precede every record of the log; it is never sent to another replica.
"""

from __future__ import annotations

import os
import time

from tiercel.server.raft.control_record import (
    control_batch,
    kraft_version_record,
    snapshot_footer_record,
    snapshot_header_record,
)
from tiercel.server.raft.kafka_metadata_log import METADATA_TOPIC_PARTITION
from tiercel.server.raft.snapshots import BOOTSTRAP_SNAPSHOT_ID, snapshot_path
from tiercel.server.raft.voter_set import VoterSet
from tiercel.storage.local_log import sync_dir

__all__ = ["write_dynamic_quorum_snapshot"]


def write_dynamic_quorum_snapshot(log_dir: str, voters: VoterSet, kraft_version: int) -> str:
    """*Blocking.* Write the bootstrap snapshot under ``log_dir`` (the metadata log dir),
    durably (a temporary file, fsynced, renamed); its path."""
    partition_dir = os.path.join(log_dir, str(METADATA_TOPIC_PARTITION))
    os.makedirs(partition_dir, exist_ok=True)
    now = int(time.time() * 1000)
    header = [
        snapshot_header_record(now),
        kraft_version_record(kraft_version),
        voters.to_voters_record(),
    ]
    data = control_batch(0, BOOTSTRAP_SNAPSHOT_ID.epoch, now, header) + control_batch(
        len(header), BOOTSTRAP_SNAPSHOT_ID.epoch, now, [snapshot_footer_record()]
    )
    destination = snapshot_path(partition_dir, BOOTSTRAP_SNAPSHOT_ID)
    temporary = destination + ".part"
    with open(temporary, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, destination)
    sync_dir(partition_dir)
    return destination
