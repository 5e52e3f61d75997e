"""The job kinds of load balancers: ``lb.apply``, ``lb.remove``, ``lb.status``.

``lb.apply`` prints one JSON object, an `LbApplyOutcome`, and exits
- 0: ``active`` (rendered, validated, reloaded, and the reload took);
- 3: ``degraded``: the validator's or the reload's own text in ``error``, the previous
  configuration still serving (also when the engine is missing and apt could not install it, or
  when the CA refused the certificate);
- 4: this node already applied a newer revision of that load balancer: nothing changed, the
  outcome names the node's revision.
Human lines go to stderr. ``lb.remove`` is idempotent (0 when already gone) and prints an
`LbRemoved`. ``lb.status`` prints the `LbHealthReport` of one load balancer (exit 1 when this
node does not serve it).
"""

from __future__ import annotations

from agent.jobs.toolkit.base import JobContext, handler
from agent.jobs.toolkit.output import JobError, Output
from agent.load_balancers.node import LbNode
from agent.load_balancers.settings import LbSettings
from contract.job_kinds.lb import LbApply, LbRemove


def node_of(ctx: JobContext) -> LbNode:
    """The agent's node, or (``fleetdeck agent run lb ...`` on a terminal) one with default settings."""
    if isinstance(ctx.lb, LbNode):
        return ctx.lb
    return LbNode(LbSettings(), ctx.state_dir)


async def apply(args: LbApply, ctx: JobContext, out: Output) -> int:
    outcome, code = await node_of(ctx).apply(args, out)
    out.json(outcome.model_dump(mode="json"))
    return code


async def remove(args: LbRemove, ctx: JobContext, out: Output) -> int:
    removed = await node_of(ctx).remove(args, out)
    out.json({"id": args.id, "removed": removed})
    return 0


async def status(args: LbRemove, ctx: JobContext, out: Output) -> int:
    report = node_of(ctx).status(args.id)
    if report is None:
        raise JobError(f"this node serves no load balancer {args.name} ({args.id})")
    out.json(report.model_dump(mode="json"))
    return 0


KINDS = [handler("lb.apply", apply), handler("lb.remove", remove), handler("lb.status", status)]
