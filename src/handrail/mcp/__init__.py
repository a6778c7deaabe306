"""Handrail over MCP (placeholder until the serve core lands; helper A owns this file)."""
