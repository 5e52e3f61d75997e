"""What every tower of fleetdeck obeys, in one package: the `/v1` wire models (`models`), the
errors with their codes (`errors`), the job kinds with their argument schemas (`job_kinds`), the
load balancers' desired state (`load_balancers`), the reconnect backoff (`backoff`) and the agent
link's frames and transfer grants (`link`).

The control plane, the agent and the client all import it; it imports none of them (nor httpx,
textual or trio: the agent loads it on every server).
"""
