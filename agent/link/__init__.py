"""The agent's side of its link to the control plane: the trio client (`client`, with `call.Call`
for one RPC). The frames themselves, shared with the control plane, are `contract.link.protocol`;
the C frame masking it installs, shared with the control plane and the client, `contract.link.fastmask`.
"""
