"""Execution status for approvers and auditors."""

from __future__ import annotations

from fastapi import APIRouter

from service.api.deps import Reviewer, RuntimeDep, TraceIdDep, refusal_recorder
from service.db import run_unit
from service.executions import actions as executions
from service.executions.schemas import ExecutionView

router = APIRouter(prefix="/v1/executions", tags=["executions"])


@router.get(
    "/{execution_id}",
    summary="Status, attempts, outcome and error of an execution",
    name="execution.read",
)
def get_execution(
    execution_id: str, runtime: RuntimeDep, principal: Reviewer, trace_id: TraceIdDep
) -> ExecutionView:
    return run_unit(
        runtime.engine,
        lambda session: executions.get(session, principal, execution_id),
        on_refusal=refusal_recorder(
            principal, "execution.read", trace_id=trace_id, execution_id=execution_id
        ),
    )
