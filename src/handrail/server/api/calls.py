"""The HTTP API's calls routes (placeholder of the seam; its part fills it)."""

from __future__ import annotations

from fastapi import APIRouter

__all__ = ["router"]

router = APIRouter()
