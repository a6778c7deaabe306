"""Long tool calls as durable tasks: the runner seam, task records, built-in task tools.

A task tool is checked (and, for a write, planned and confirmed) like any other; then
the gate submits it to a `TaskRunner` and answers QUEUED with a task id. See `runner`
for the seam, `service` for binding tools, `records` for the record every runner moves.
"""

from handrail.tasks._effects import TaskEffects
from handrail.tasks.memory import InMemoryTaskRunner, MemoryJournal
from handrail.tasks.records import TASK_MANAGE_PERMISSION, TaskRecords
from handrail.tasks.runner import (
    TaskBody,
    TaskCancelled,
    TaskExpired,
    TaskFailure,
    TaskHost,
    TaskRunner,
    TaskScope,
    TaskState,
    TaskSubmission,
)
from handrail.tasks.service import TaskService
from handrail.tasks.tools import task_tools

__all__ = [
    "TASK_MANAGE_PERMISSION",
    "InMemoryTaskRunner",
    "MemoryJournal",
    "TaskBody",
    "TaskCancelled",
    "TaskEffects",
    "TaskExpired",
    "TaskFailure",
    "TaskHost",
    "TaskRecords",
    "TaskRunner",
    "TaskScope",
    "TaskService",
    "TaskState",
    "TaskSubmission",
    "task_tools",
]
