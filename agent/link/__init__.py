"""The agent's side of its link to the control plane: the trio client (`client`, with `call.Call`
for one RPC) and the frame masking it uses (`fastmask`). The frames themselves, shared with the
control plane, are `contract.link.protocol`.
"""
