"""Who may do what, to which resource, and how often.

Owns the tool permission check the gate runs before stage 3 reads any data, stage 4
(the resource-level policy engine and its rules: allow, confirm, approve, deny), the
conversation guard against bypasses, rate limits and intent routing. Never executes a
tool and never reads model arguments as identity.
"""
