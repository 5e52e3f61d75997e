"""Jobs: the whitelisted ``<domain>.<action>`` kinds this agent runs natively, and their manager.

`manager.JobManager` serves ``job.run``/``job.attach``/``job.cancel``; `kinds.all_kinds` is the handler table;
`local.main` is ``fleetdeck agent run``.
"""
