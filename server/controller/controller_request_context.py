"""What a controller listener's request handler knows of its request besides the request
itself (Kafka's ``ControllerRequestContext``, with the listener it came in on, and who
sent it for the authorizer)."""

from __future__ import annotations

from dataclasses import dataclass

from tiercel.server.authorizer.authorizer import Authorizer
from tiercel.server.controller.quorum_controller import QuorumController
from tiercel.server.network.principal_builder import ANONYMOUS, KafkaPrincipal

__all__ = ["ControllerRequestContext"]


@dataclass(frozen=True, slots=True)
class ControllerRequestContext:
    """``listener_name``: the controller listener the request arrived on;
    ``principal`` and ``client_address``: the connection's, or for a request a broker
    forwarded, its client's (the Envelope's); ``authorizer``: the controller's, None
    without one. A value; event-loop only, as the controller it names."""

    controller: QuorumController
    listener_name: str
    principal: KafkaPrincipal = ANONYMOUS
    client_address: str = ""
    authorizer: Authorizer | None = None
