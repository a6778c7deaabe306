"""MCP both ways: serve the registry through the gate, and a firewall in front of upstreams.

(Placeholder of the proxy branch; helper A's lazy exports replace it at merge.)
"""
