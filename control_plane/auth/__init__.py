"""Authentication (passwords, tokens) and authorisation (roles, capabilities, plans)."""
