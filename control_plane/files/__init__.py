"""Area A, the file workspace: `/v1/servers/{id}/fs/*`, brokered to the agent's `fs.*` RPCs."""
