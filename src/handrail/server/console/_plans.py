"""Console pages (filled below)."""

from __future__ import annotations

from fastapi import APIRouter

__all__ = ["router"]

router = APIRouter()
