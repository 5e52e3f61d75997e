"""Area C, job dispatch: the whitelisted catalog, its checks, the runner that streams a job from
its agent, and the `/v1` job routes."""
