"""Stage 4 and the risk decision: who may do what to which resource, and how often.

Owns the policy engine and its rules (allow, confirm, approve, deny), the conversation
guard against bypasses, rate limits and intent routing. Never executes a tool and
never reads model arguments as identity.
"""
