"""Result shaping: what the model sees of a tool's result.

Projection (field allowlist) → redaction → budget (truncate or page) → untrusted-data
marking; the full raw result is kept for people behind a reference.
"""
