"""The bookstore served over MCP: `handrail mcp serve` in front of examples.bookstore.

`server.build_app` is the `--app` factory (it loads the sample tenants into a fresh
database), `client.py` is a small MCP client built on the official SDK that starts the
server over stdio, lists its tools and calls them, and `mcp.json` is the `mcpServers`
configuration a desktop client or the MCP Inspector reads.
"""
