"""Stages 1-3 of every call, in order: JSON syntax, JSON Schema, business rules.

Each stage refuses with its own code and field errors the model can act on. Never
authorizes (that is `handrail.authz`) and never executes anything.
"""
