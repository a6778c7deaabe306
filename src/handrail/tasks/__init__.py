"""Long tool calls as durable tasks: the runner seam, task records, built-in task tools.

A task tool is checked (and, for a write, planned and confirmed) like any other; then
the gate submits it to a `TaskRunner` and answers QUEUED with a task id. See `runner`.
"""
