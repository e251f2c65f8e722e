"""Who is calling: the one identity type shared by all three front doors.

A principal comes only from a credential (DESIGN.md §7), never from tool
arguments or a request body.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from service.errors import permission_denied


class Role(StrEnum):
    AGENT = "agent"
    APPROVER = "approver"
    AUDITOR = "auditor"
    ADMIN = "admin"


@dataclass(frozen=True)
class Principal:
    tenant: str
    subject: str
    role: Role
    token_id: str
    on_behalf_of: str | None = None  # agents act for one end user

    @property
    def actor(self) -> str:
        """How this principal appears in the audit log, e.g. ``agent:support-bot``."""
        return f"{self.role.value}:{self.subject}"

    def require(self, *roles: Role) -> None:
        """Refuse unless this principal holds one of ``roles``."""
        if self.role not in roles:
            allowed = " or ".join(role.value for role in roles)
            raise permission_denied(f"This operation needs the {allowed} role.")
