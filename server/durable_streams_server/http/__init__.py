"""The ASGI surface: routing, request parsing, response rendering, SSE."""
