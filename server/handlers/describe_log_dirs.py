"""DescribeLogDirs (35): each log dir with its partitions' sizes and free space; an
offline one (its I/O failed) with KAFKA_STORAGE_ERROR."""

from __future__ import annotations

import os
from collections import defaultdict
from typing import Any, Final

from tiercel.protocol.errors import ErrorCode
from tiercel.server.authorizer.acl import CLUSTER_NAME, AclOperation, ResourceType
from tiercel.server.authorizer.auth_helper import authorize
from tiercel.server.request_context import RequestContext
from tiercel.storage.log_manager import total_and_usable_bytes

API_KEY: Final = 35
MIN_VERSION: Final = 1
MAX_VERSION: Final = 4


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    # DESCRIBE on the cluster (Kafka's handleDescribeLogDirsRequest).
    if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.cluster_authorization_failed,
            "results": [],
        }
    log_manager = ctx.broker.log_manager
    wanted: dict[str, set[int]] | None = None
    if request.topics is not None:
        wanted = {t.topic: set(t.partitions) for t in request.topics}
    by_dir: dict[str, dict[str, list[dict[str, Any]]]] = {
        d: defaultdict(list) for d in log_manager.log_dirs
    }
    for tp, log in sorted(log_manager.logs.items()):
        if wanted is not None and tp.partition not in wanted.get(tp.topic, ()):
            continue
        by_dir[os.path.dirname(log.dir)][tp.topic].append(
            {
                "partition_index": tp.partition,
                "partition_size": log.size,
                "offset_lag": 0,
                "is_future_key": False,
            }
        )
    results = []
    for log_dir, topics in by_dir.items():
        total, usable = await ctx.broker.scheduler.run_blocking(total_and_usable_bytes, log_dir)
        results.append(
            {
                "error_code": ErrorCode.none,
                "log_dir": log_dir,
                "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()],
                "total_bytes": total,
                "usable_bytes": usable,
            }
        )
    for log_dir in log_manager.offline_log_dirs:
        # Kafka's describeLogDirs: an offline dir is listed with its error, and no sizes.
        results.append(
            {
                "error_code": ErrorCode.kafka_storage_error,
                "log_dir": log_dir,
                "topics": [],
                "total_bytes": -1,
                "usable_bytes": -1,
            }
        )
    return {"throttle_time": 0, "error_code": ErrorCode.none, "results": results}
