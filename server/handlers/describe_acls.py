"""DescribeAcls (29), answered by the broker from its own authorizer (Kafka's
KafkaApis.handleDescribeAcls → AclApis; `server/authorizer/acl_apis`)."""

from __future__ import annotations

from typing import Any, Final

from tiercel.server.authorizer.acl_apis import describe_acls
from tiercel.server.request_context import RequestContext

API_KEY: Final = 29
MIN_VERSION: Final = 1
MAX_VERSION: Final = 3


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    return describe_acls(ctx, request)
