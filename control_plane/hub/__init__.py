"""The control plane's end of the agent links (anyio only: runs on trio and on asyncio).

`AgentHub.handle` is the body of the WebSocket route ``/v1/agent/link``; everything else in the
control plane reaches agents through `AgentHub.call`, `open_stream` and `open_upload`. The wire
protocol is `contract.link.protocol`.
"""

from control_plane.hub.errors import AgentCallError, AgentOfflineError, AgentTimeoutError
from control_plane.hub.hub import AgentHub, LinksFirst, ReplyStream, UploadStream
from control_plane.hub.link import AgentSession

__all__ = [
    "AgentCallError",
    "AgentHub",
    "AgentOfflineError",
    "AgentSession",
    "AgentTimeoutError",
    "LinksFirst",
    "ReplyStream",
    "UploadStream",
]
