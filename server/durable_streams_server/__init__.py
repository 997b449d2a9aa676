"""A Durable Streams protocol server whose storage is Delta Lake tables.

``create_app(ServerConfig(...))`` returns an ASGI application; the
``durable-streams-server`` command runs it on uvicorn.
"""

from .allocator_env import native_allocator_env

native_allocator_env()  # (before anything imports pyarrow or deltalake: their allocators read it then)

from .config import ServerConfig  # noqa: E402
from .server import create_app  # noqa: E402

__all__ = ["ServerConfig", "create_app"]
