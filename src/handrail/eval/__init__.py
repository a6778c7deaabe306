"""Evaluation: score model output, policy and execution together, not how answers sound.

`handrail eval` runs a suite of scenarios (a scripted model's cassettes, or an
OpenAI-compatible endpoint) through the real agent loop, gate and stores and reports
per layer (`report.METRICS`); `handrail eval bfcl` scores answers to the BFCL questions
with Handrail's validation and an argument matcher. Reports are JSON
(`report.EvalReport`), a terminal table and a self-contained HTML page; `compare`
shows what regressed between two runs.
"""
