"""The agent's file workspace: every path goes through `jail.Jail`."""
