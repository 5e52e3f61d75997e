"""The toolkit of the job handlers: what every domain of `agent.jobs` builds on, and no domain.

`base` (the job's context, its `Output`, `JobError` and the exit codes, the dispatcher), `proc`
(processes: `capture_command`, `stream_command`, `require`, `which`), `host` (where the services
live, and their control), `common` (accounts and sites), `boundary` (the privilege boundary: every
act on a site user's tree), `site_files` (one file of a site, read or written through its jail),
`site_web` (a site's nginx server block and PHP-FPM pool, rendered from its registry entry) and
`git_proxy`. A domain module imports these and the contract, never another domain's module
(`tests/test_layers.py`).
"""
