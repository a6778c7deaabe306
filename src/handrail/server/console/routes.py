"""The console's routes (placeholder of the seam; the console part fills it)."""

from __future__ import annotations

from fastapi import APIRouter

__all__ = ["router"]

router = APIRouter()
