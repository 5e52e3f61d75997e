"""The `/v1` routes that are not an area of their own (health, auth, servers)."""
