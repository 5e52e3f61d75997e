"""Who is calling, and what they may do: roles, capabilities and plans of CONTRACT.md."""

from __future__ import annotations

from typing import get_args

from pydantic import BaseModel, ConfigDict

from contract.errors import Forbidden, TierRequired
from contract.models import PLANS, Capability, Plan, Role

ALL_CAPABILITIES: frozenset[Capability] = frozenset(get_args(Capability))

# The contract's table. `file_write` = file writes in a site scope; `root_scope` = the server-root
# scope, cross-site and cross-server file operations.
ROLE_CAPABILITIES: dict[Role, frozenset[Capability]] = {
    "owner": ALL_CAPABILITIES,
    "admin": ALL_CAPABILITIES - {"root_scope"},
    "operator": frozenset({"observe", "content", "infra", "file_write"}),
    "member": frozenset({"observe"}),
}


def capabilities_for(role: Role, super_admin: bool, narrowed: frozenset[str] | None) -> frozenset[Capability]:
    """A membership may narrow the role's capabilities, never widen them; super-admins have all."""
    if super_admin:
        return ALL_CAPABILITIES
    granted = ROLE_CAPABILITIES[role]
    if narrowed is not None:
        granted = frozenset(c for c in granted if c in narrowed)
    return granted


def plan_at_least(current: Plan, required: Plan) -> bool:
    return PLANS.index(current) >= PLANS.index(required)


class Principal(BaseModel):
    """The caller, validated from its token's row (`control_plane.state.authenticate`) or from the
    fields another replica relayed; the row's other columns are not the caller's and are left out."""

    model_config = ConfigDict(frozen=True)

    user_id: str
    email: str
    name: str
    super_admin: bool
    org_id: str
    org_name: str
    plan: Plan
    role: Role
    capabilities: frozenset[Capability]
    token_kind: str  # "session" | "api"

    def require(self, capability: Capability) -> None:
        if capability not in self.capabilities:
            raise Forbidden(f"your role ({self.role}) does not allow this", details={"capability": capability})

    def require_role(self, *roles: Role) -> None:
        if not self.super_admin and self.role not in roles:
            raise Forbidden(f"only {' or '.join(roles)} may do this; your role is {self.role}")

    def require_plan(self, required: Plan) -> None:
        if not plan_at_least(self.plan, required):
            raise TierRequired(
                f"this needs plan {required} or higher; the organisation is on {self.plan}",
                details={"required_plan": required, "current_plan": self.plan},
            )
