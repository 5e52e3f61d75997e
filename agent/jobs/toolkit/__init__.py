"""The toolkit of the job handlers: what every domain of `agent.jobs` builds on, and no domain.

- `output`: `Output` (where a handler's lines go), `JobError`, the shared exit codes;
- `base`: the job's context (`JobContext`), `handler`, and `run_kind`, the one way a job runs;
- `proc`: processes (`capture_command`, `stream_command`, `require`, `which`, apt's environment);
- `host`: where the services live (the host layout) and their control;
- `common`: accounts and sites; `boundary`: every act on a site user's tree (the privilege
  boundary); `site_files`: one file of a site, read or written through its jail;
- services several domains use: `site_web` (a site's nginx server block and PHP-FPM pool,
  rendered from its registry entry, and `change_site`), `php_fpm` (PHP as the agent finds it),
  `site_teardown` (what other domains forget of a deleted site), `logfiles`, `disk_usage`,
  `machine` (memory, space, uptime) and `git_proxy`.

A domain module imports these and the contract, never another domain's module, and the toolkit
imports no domain (`tests/test_layers.py`, which also keeps the toolkit free of import cycles).
"""
