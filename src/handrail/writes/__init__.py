"""Plan → confirm → execute once: the write path.

Owns proposals and plans' lifecycle (`service`), confirmation tokens, the executor of
keyed writes with its leases and fences, the typed outcome of every write, and the
reconciler of writes whose outcome is unknown. Never decides authorization (it asks
`handrail.authz`) and never shapes what the model reads beyond the envelope.
"""
