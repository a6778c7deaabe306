"""The agent loop: a model, the gate, hard budgets and evidence-checked final answers."""
