"""What a controller listener's request handler knows of its request besides the request
itself (Kafka's ``ControllerRequestContext``, with the listener it came in on)."""

from __future__ import annotations

from dataclasses import dataclass

from tiercel.server.controller.quorum_controller import QuorumController

__all__ = ["ControllerRequestContext"]


@dataclass(frozen=True, slots=True)
class ControllerRequestContext:
    """``listener_name``: the controller listener the request arrived on. A value;
    event-loop only, as the controller it names."""

    controller: QuorumController
    listener_name: str
