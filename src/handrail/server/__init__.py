"""The service: Handrail's HTTP gateway and approvals console, an ASGI app.

`handrail serve --config handrail.toml` runs it with uvicorn. Machine clients post tool
calls in their provider's wire format with an API key (or a JWT); people log in to the
console to read a plan's impact and confirm, reject or revise it. Every worker shares
its state through the store (and Redis, when configured), so several can run at once.
"""

from __future__ import annotations

from handrail.server.app import create_app
from handrail.server.config import ServerConfig, load_config
from handrail.server.services import Services, open_services

__all__ = ["ServerConfig", "Services", "create_app", "load_config", "open_services"]
