"""The HTTP API (under /v1) and the health checks, one module per resource."""
