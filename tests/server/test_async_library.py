"""httpx (the server's webhook deliveries; a cluster node's probes, peers and fork copies) asks, through
httpcore, which async library runs at every lock it makes. Without ``sniffio`` each ask is a failed
import, a search of ``sys.path``: ~39 µs each, and ~0.5 ms of CPU per request. The server extra
installs it (setup.py); this checks that httpx's requests find it."""

from __future__ import annotations

import subprocess
import sys

_SCRIPT = """
import asyncio, sys, threading, http.server, socketserver
import httpx

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *args):
        pass

server = socketserver.TCPServer(("127.0.0.1", 0), Handler)
threading.Thread(target=server.serve_forever, daemon=True).start()

async def main():
    async with httpx.AsyncClient() as client:
        answer = await client.get(f"http://127.0.0.1:{server.server_address[1]}/")
        assert answer.status_code == 200, answer

assert "sniffio" not in sys.modules
asyncio.run(main())
print("sniffio" in sys.modules)
"""


def test_httpx_requests_find_the_async_library_without_a_failed_import() -> None:
    done = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True", "sniffio is not installed: httpcore fails an import at every lock"
