"""A loopback TCP relay in front of moto's S3 server that can take the endpoint away.

``down`` closes the listening socket (connections are refused) and resets every open
connection; ``freeze`` keeps accepting but forwards nothing (requests go unanswered).
Both are what the server sees of an object store that has gone away, while moto keeps
its objects (killing moto's server mode would lose them: it holds them in memory).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading

from servers import MotoServer, free_port


class S3Endpoint:
    """A TCP relay to moto that can be taken down (refusing and resetting connections)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self._listener: socket.socket | None = None
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._flowing = threading.Event()
        self._flowing.set()

    def __enter__(self) -> S3Endpoint:
        self.up()
        return self

    def __exit__(self, *_: object) -> None:
        self.thaw()
        with self._lock:
            listening = self._listener is not None
        if listening:
            self.down()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def storage_options(self, moto: MotoServer) -> dict[str, str]:
        """moto's storage options, with the endpoint through this relay."""
        return moto.storage_options() | {"AWS_ENDPOINT_URL": self.url}

    def up(self) -> None:
        listener = socket.create_server(("127.0.0.1", self.port))  # SO_REUSEADDR: same port again
        with self._lock:
            self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def down(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            sockets, self._open = self._open, set()
        assert listener is not None
        listener.shutdown(socket.SHUT_RDWR)  # wakes accept()
        listener.close()
        for sock in sockets:
            _reset(sock)

    def freeze(self) -> None:
        """Keep accepting connections and requests, but forward nothing (no answers)."""
        self._flowing.clear()

    def thaw(self) -> None:
        self._flowing.set()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            with self._lock:
                if self._listener is not listener:
                    _reset(client)
                    _reset(upstream)
                    continue
                self._open |= {client, upstream}
            for source, target in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._relay, args=(source, target), daemon=True).start()

    def _relay(self, source: socket.socket, target: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                self._flowing.wait()
                target.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, target):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()


def _reset(sock: socket.socket) -> None:
    """Abort the connection: the peer sees a reset, not an orderly close."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
