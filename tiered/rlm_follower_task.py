"""A follower's view of what its leader copied (Kafka's RemoteLogManager.RLMFollowerTask):
each round moves the log's highest remote offset to the highest offset copied on its
leader-epoch lineage, so that the follower's local retention, too, deletes only segments
the remote tier has. Event-loop only.
"""

from __future__ import annotations

from tiercel.tiered.remote_log_segment_candidates import find_highest_remote_offset
from tiercel.tiered.rlm_task import RLMTask

__all__ = ["RLMFollowerTask"]


class RLMFollowerTask(RLMTask):
    failure_event = "remote_follower_task_failed"

    async def run_once(self) -> None:
        if self.log.remote_log_enabled:
            highest = find_highest_remote_offset(self.context.rlmm, self.partition, self.log)
            self.log.update_highest_offset_in_remote_storage(highest)
