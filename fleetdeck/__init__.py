"""The composition root: the one `fleetdeck` command, the embedded local stack, and the demo.

This is the only package that imports more than one of the towers (`tui`, `api_client`,
`control_plane`, `agent`; `contract` is below them all); none of them imports it.
"""
