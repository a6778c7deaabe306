"""Plan → confirm → execute once: the write path.

Owns plans' lifecycle (`service`, a façade over `_decisions` and `_running`), tokens,
the keyed executor with its leases and fences, the typed outcome of every write, and the
reconciler of UNKNOWN writes. Never decides authorization (it asks `handrail.authz`)
and never shapes what the model reads beyond the envelope.
"""
