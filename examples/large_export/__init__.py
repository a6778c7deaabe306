"""The seed's large export as a task: approval above 1,000 rows, run later with checkpoints."""
