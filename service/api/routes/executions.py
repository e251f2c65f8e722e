"""Execution status for approvers and auditors."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from service.api.deps import ReadUnit, Reviewer
from service.api.errors import problems
from service.executions import review
from service.executions.schemas import EXECUTION_ID_PATTERN, ExecutionView

router = APIRouter(prefix="/v1/executions", tags=["executions"])

ExecutionId = Annotated[
    str, Path(pattern=EXECUTION_ID_PATTERN, description="exe_ + 24 hex digits.")
]


@router.get(
    "/{execution_id}",
    summary="Status, attempts, outcome and error of an execution",
    name="execution.read",
    responses=problems(400, 401, 403, 404),
)
def get_execution(
    execution_id: ExecutionId, session: ReadUnit, principal: Reviewer
) -> ExecutionView:
    return review.get(session, principal, execution_id)
