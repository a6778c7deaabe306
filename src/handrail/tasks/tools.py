"""The built-in task tools: `get_task_status` and `cancel_task`, for the principal's tenant only.

A task of another tenant, a missing one and a forged id are the same NOT_FOUND, so an id
never reveals that it exists elsewhere. The status carries the tool's own progress
message and result, which are untrusted data (the envelope says so). Never runs a task.
"""

from __future__ import annotations

from typing import Any

from handrail.context import ToolContext
from handrail.declare.definition import Tool, tool
from handrail.errors import AccessRefusedError, Conflict, ErrorCode, NotFound, ToolSignal
from handrail.spec import RiskLevel
from handrail.tasks.service import TaskService

__all__ = ["task_tools"]


_STATUS = (
    "The state of a task you started: queued, running (with progress), succeeded (with the "
    "result or a reference to it), failed (with an error code), cancelled or expired. Call "
    "it with the task_id a task tool answered; poll sparingly."
)
_CANCEL = (
    "Stop a task you started. A queued task never runs; a running one stops at its next "
    "step. A task that already finished cannot be cancelled."
)


class _Denied(ToolSignal):
    code = ErrorCode.PERMISSION_DENIED


def _signal(refused: AccessRefusedError) -> ToolSignal:
    if refused.code is ErrorCode.CONFLICT:
        return Conflict(refused.message)
    if refused.code is ErrorCode.PERMISSION_DENIED:
        return _Denied(refused.message)
    return NotFound(refused.message)


def task_tools(service: TaskService, *, namespace: str | None = None) -> tuple[Tool, Tool]:
    """`get_task_status` and `cancel_task` over `service`, to register with the task tools.

    `cancel_task` changes only Handrail's own task record (a request to stop, taken once)
    and is declared like a read: it needs no plan, and a repeat is the same request.
    """

    @tool(
        risk=RiskLevel.L1_INTERNAL_READ,
        namespace=namespace,
        timeout=10.0,
        description=_STATUS,
    )
    async def get_task_status(task_id: str, ctx: ToolContext) -> dict[str, Any]:
        """A task of the caller's tenant, described."""
        try:
            return await service.status(task_id, ctx.principal)
        except AccessRefusedError as refused:
            raise _signal(refused) from None

    @tool(
        risk=RiskLevel.L1_INTERNAL_READ,
        namespace=namespace,
        timeout=10.0,
        description=_CANCEL,
    )
    async def cancel_task(task_id: str, ctx: ToolContext) -> dict[str, Any]:
        """Cancel a task of the caller's tenant."""
        try:
            return await service.cancel(task_id, ctx.principal)
        except AccessRefusedError as refused:
            raise _signal(refused) from None

    return get_task_status, cancel_task
