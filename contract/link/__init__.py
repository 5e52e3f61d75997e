"""The agent link's wire: its frames (`protocol`), what the hello and each call's params may hold
(`params`), and the transfer grants the control plane signs for direct uploads and downloads
(`grant`). The agent's side of the link is `agent.link`; the control plane's is
`control_plane.hub`."""
