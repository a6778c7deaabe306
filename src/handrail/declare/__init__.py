"""What a tool is: its declaration, the registry, and the schemas derived from both.

Owns `Tool` and `@tool` (a spec bound to its implementation), the `Registry` (the one
source of what the model sees and what runs, and the exposure of a principal), schema
derivation and preparation (identity parameters refused, `$ref`s resolved from the
host's local store, integer places compiled) and the values a tool's hooks answer.
Never checks a call, authorizes or executes anything.
"""
