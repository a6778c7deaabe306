"""Re-collecting an asset's data: a read, a confirmed write, a lost response, reconciled.

The model reads why an asset stopped collecting and proposes a recovery ticket; the
user confirms the plan; the ticket service (its own SQLite file) commits but its
answer is lost, so the write is UNKNOWN until the reconciler finds the ticket by key.
"""

from examples.recovery.app import RecoveryApp, build_app
from examples.recovery.service import (
    CollectionMonitor,
    CollectStatus,
    ResponseLoss,
    Ticket,
    TicketService,
)
from examples.recovery.tools import build_tools

__all__ = [
    "CollectStatus",
    "CollectionMonitor",
    "RecoveryApp",
    "ResponseLoss",
    "Ticket",
    "TicketService",
    "build_app",
    "build_tools",
]
