from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel

from service.executions.models import AttemptResult, ExecutionStatus

EXECUTION_ID_PATTERN = r"^exe_[0-9a-f]{24}$"
EXECUTE_TASK = "draftgate.execute"
SWEEP_TASK = "draftgate.sweep"
CHECKPOINT_TASK = "draftgate.checkpoint"


class AttemptView(BaseModel):
    number: int
    started_at: datetime
    finished_at: datetime | None
    result: AttemptResult
    detail: dict[str, Any] | None


class ExecutionView(BaseModel):
    execution_id: str
    draft_id: str
    revision: int
    action: str
    status: ExecutionStatus
    attempts: list[AttemptView]
    outcome: dict[str, Any] | None
    error: dict[str, Any] | None
    requested_by: str
    created_at: datetime
    finished_at: datetime | None


class ExecutionAccepted(BaseModel):
    execution_id: str
    status: ExecutionStatus
