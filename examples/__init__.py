"""Runnable examples of Handrail, importable as `examples.*` from the repository root."""
