"""The agent's link to the control plane.

`protocol` is the wire specification, shared with the control plane: it imports no async
library, and this package module imports nothing, so `from agent.link import protocol` never
drags trio into the control plane. The trio client lives in `client` (with `call.Call`).
"""
