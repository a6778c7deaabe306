"""What people see later: the audit trail, call trails and raw results.

Owns building and sinking audit events, the per-call trail the gate writes, and raw
results kept behind a reference with their read rules. Never decides anything about a
call; it records what was decided.
"""
