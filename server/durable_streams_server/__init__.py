"""A Durable Streams protocol server whose storage is Delta Lake tables.

``create_app(ServerConfig(...))`` returns an ASGI application; the
``durable-streams-server`` command runs it on uvicorn.
"""

from .config import ServerConfig
from .server import create_app

__all__ = ["ServerConfig", "create_app"]
