"""A loopback TCP relay in front of moto's S3 server that can take the endpoint away.

``down`` closes the listening socket (connections are refused) and resets every open
connection; ``freeze`` keeps accepting but forwards nothing (requests go unanswered).
Both are what the server sees of an object store that has gone away, while moto keeps
its objects (killing moto's server mode would lose them: it holds them in memory).

The relay runs in a child process (this file run as a script, driven by one-line commands
on its stdin), not in threads of the test process: deltalake holds the GIL through the
network I/O of some calls (1.6: ``DeltaTable.history``, ``alter.set_table_properties``), so
relay threads in the process making that call could not forward its requests, and the call
would hang until its object-store timeout. Otherwise it is a plain TCP proxy: each
connection is one thread that alone owns (and closes) its two sockets, an end of stream is
passed on as a half-close (``shutdown(SHUT_WR)``) and a reset as a reset.
"""

from __future__ import annotations

import contextlib
import errno
import os
import selectors
import socket
import struct
import subprocess
import sys
import threading
import time

from servers import MotoServer, free_port

SCRIPT = os.path.abspath(__file__)
CHUNK = 65536
CONNECT_TIMEOUT_S = 10.0
WAIT_S = 10.0
PORT_ATTEMPTS = 5
"""Ports tried for a relay's first start (``S3Endpoint.up``)."""


class S3Endpoint:
    """A TCP relay to moto that can be taken down (refusing and resetting connections)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self._proc: subprocess.Popen[str] | None = None
        self._listening = False
        self._ever_up = False
        """Whether it has listened: until then nobody has been given ``port``, so one another
        process took meanwhile (``free_port`` found it free only a moment before) is chosen again."""
        self._lock = threading.Lock()

    def __enter__(self) -> S3Endpoint:
        self.up()
        return self

    def __exit__(self, *_: object) -> None:
        try:
            self.thaw()
            if self._listening:
                self.down()
        finally:
            self.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def storage_options(self, moto: MotoServer) -> dict[str, str]:
        """moto's storage options, with the endpoint through this relay."""
        return moto.storage_options() | {"AWS_ENDPOINT_URL": self.url}

    def up(self) -> None:
        for attempt in range(PORT_ATTEMPTS):
            try:
                self._command("up")
                break
            except RuntimeError as error:
                if self._ever_up or "Address already in use" not in str(error) or attempt == PORT_ATTEMPTS - 1:
                    raise
                self.close()
                self.port = free_port()
        self._listening = self._ever_up = True

    def down(self) -> None:
        """Refuse new connections and reset the open ones (done when this returns)."""
        self._command("down")
        self._listening = False

    def freeze(self) -> None:
        """Keep accepting connections and requests, but forward nothing (no answers)."""
        self._command("freeze")

    def thaw(self) -> None:
        self._command("thaw")

    def close(self) -> None:
        """End the relay process (its connections go with it)."""
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is None:
            return
        assert proc.stdin is not None and proc.stdout is not None
        with contextlib.suppress(OSError):
            proc.stdin.close()  # end of its commands: the relay exits
        try:
            proc.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        self._listening = False

    def _command(self, command: str) -> None:
        with self._lock:
            if self._proc is None:
                if command != "up":
                    raise RuntimeError(f"relay {command}: the relay is not running")
                self._proc = subprocess.Popen(
                    [sys.executable, SCRIPT, str(self.target_port), str(self.port)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
            proc = self._proc
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(command + "\n")
                proc.stdin.flush()
            except OSError as error:
                raise RuntimeError(f"relay {command}: the relay process is gone ({proc.poll()})") from error
            reply = proc.stdout.readline().strip()
        if reply != "ok":
            raise RuntimeError(f"relay {command}: {reply or f'the relay process is gone ({proc.poll()})'}")


# --- the relay process -------------------------------------------------------------------


class _Relay:
    def __init__(self, target_port: int, port: int) -> None:
        self.target_port = target_port
        self.port = port
        self.flowing = threading.Event()
        self.flowing.set()
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self._pipes: set[_Pipe] = set()

    def up(self) -> None:
        with self._lock:
            if self._listener is not None:
                raise RuntimeError("already up")
            listener = socket.create_server(("127.0.0.1", self.port))  # SO_REUSEADDR: same port again
            self._listener = listener
            self._acceptor = threading.Thread(target=self._accept, args=(listener,), daemon=True)
            self._acceptor.start()

    def down(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            acceptor, self._acceptor = self._acceptor, None
            pipes, self._pipes = self._pipes, set()
        if listener is None or acceptor is None:
            raise RuntimeError("not up")
        # Wakes accept(), which fails from then on; the accepting thread closes the socket
        # (so that no thread ever uses a closed, and maybe reused, descriptor).
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)
        acceptor.join(WAIT_S)
        for pipe in pipes:
            pipe.abort()
        for pipe in pipes:
            pipe.finished.wait(WAIT_S)

    def freeze(self) -> None:
        self.flowing.clear()

    def thaw(self) -> None:
        self.flowing.set()
        with self._lock:
            pipes = list(self._pipes)
        for pipe in pipes:
            pipe.wake()

    def stop(self) -> None:
        with self._lock:
            listening = self._listener is not None
        if listening:
            self.down()

    def _accept(self, listener: socket.socket) -> None:
        try:
            while True:
                try:
                    client, _ = listener.accept()
                except OSError:
                    return
                pipe = _Pipe(client, self)
                with self._lock:
                    if self._listener is not listener:  # went down meanwhile
                        _reset(client)
                        continue
                    self._pipes.add(pipe)
                threading.Thread(target=pipe.run, daemon=True).start()
        finally:
            listener.close()

    def forget(self, pipe: _Pipe) -> None:
        with self._lock:
            self._pipes.discard(pipe)


class _Direction:
    def __init__(self, source: socket.socket, target: socket.socket) -> None:
        self.source = source
        self.target = target
        self.buffer = bytearray()
        self.eof = False  # the source has ended its stream
        self.done = False  # ... and that end has been passed on to the target


class _Pipe:
    """One relayed connection. Its thread alone uses and closes its sockets: the upstream
    connect happens here (not on the accepting thread), and other threads only set a flag
    and write to the wake-up socket."""

    def __init__(self, client: socket.socket, relay: _Relay) -> None:
        self.client = client
        self.relay = relay
        self.finished = threading.Event()
        self._aborted = threading.Event()
        self._lock = threading.Lock()
        self._closed = False
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)

    def wake(self) -> None:
        with self._lock:
            if not self._closed:
                with contextlib.suppress(OSError):  # full: a wake-up is pending anyway
                    self._wake_w.send(b"!")

    def abort(self) -> None:
        self._aborted.set()
        self.wake()

    def run(self) -> None:
        upstream: socket.socket | None = None
        selector = selectors.DefaultSelector()
        reset = True
        try:
            self.client.setblocking(False)
            selector.register(self._wake_r, selectors.EVENT_READ)
            upstream = self._connect(selector)
            if upstream is not None:
                reset = self._forward(selector, upstream)
        except OSError:
            reset = True
        finally:
            selector.close()
            for sock in (self.client, upstream):
                if sock is not None:
                    if reset:
                        _reset(sock)
                    else:
                        sock.close()
            with self._lock:
                self._closed = True
                self._wake_r.close()
                self._wake_w.close()
            self.relay.forget(self)
            self.finished.set()

    def _select(self, selector: selectors.BaseSelector, timeout: float | None) -> dict[object, int]:
        ready: dict[object, int] = {}
        for key, events in selector.select(timeout):
            if key.fileobj is self._wake_r:
                with contextlib.suppress(OSError):
                    while self._wake_r.recv(256):
                        pass
            else:
                ready[key.fileobj] = events
        return ready

    def _connect(self, selector: selectors.BaseSelector) -> socket.socket | None:
        """A non-blocking connect to moto; None (and the client is reset) if it fails."""
        upstream = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        upstream.setblocking(False)
        if upstream.connect_ex(("127.0.0.1", self.relay.target_port)) in (0, errno.EINPROGRESS):
            selector.register(upstream, selectors.EVENT_WRITE)
            deadline = time.monotonic() + CONNECT_TIMEOUT_S
            while not self._aborted.is_set() and (remaining := deadline - time.monotonic()) > 0:
                if upstream in self._select(selector, remaining):
                    selector.unregister(upstream)
                    if upstream.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                        return upstream
                    break
            with contextlib.suppress(KeyError):
                selector.unregister(upstream)
        upstream.close()
        return None

    def _forward(self, selector: selectors.BaseSelector, upstream: socket.socket) -> bool:
        """Relay until both directions have ended; True if the connection is to be reset."""
        directions = (_Direction(self.client, upstream), _Direction(upstream, self.client))
        while not all(direction.done for direction in directions):
            if self._aborted.is_set():
                return True
            flowing = self.relay.flowing.is_set()
            wanted = {self.client: 0, upstream: 0}
            for direction in directions:
                if not direction.eof and len(direction.buffer) < CHUNK:
                    wanted[direction.source] |= selectors.EVENT_READ
                if flowing and direction.buffer:
                    wanted[direction.target] |= selectors.EVENT_WRITE
            for sock, events in wanted.items():
                _watch(selector, sock, events)
            ready = self._select(selector, None)
            if self._aborted.is_set():
                return True
            flowing = self.relay.flowing.is_set()
            try:
                for direction in directions:
                    if ready.get(direction.source, 0) & selectors.EVENT_READ and not direction.eof:
                        with contextlib.suppress(BlockingIOError, InterruptedError):
                            data = direction.source.recv(CHUNK)
                            direction.buffer += data
                            direction.eof = not data
                    if not flowing:
                        continue
                    if direction.buffer and ready.get(direction.target, 0) & selectors.EVENT_WRITE:
                        with contextlib.suppress(BlockingIOError, InterruptedError):
                            del direction.buffer[: direction.target.send(direction.buffer)]
                    if direction.eof and not direction.buffer and not direction.done:
                        with contextlib.suppress(OSError):  # the target may have closed already
                            direction.target.shutdown(socket.SHUT_WR)
                        direction.done = True
            except OSError:  # a reset (or a broken pipe) on one side: the other is reset too
                return True
        return False


def _watch(selector: selectors.BaseSelector, sock: socket.socket, events: int) -> None:
    try:
        registered: int | None = selector.get_key(sock).events
    except KeyError:
        registered = None
    if not events:
        if registered is not None:
            selector.unregister(sock)
    elif registered is None:
        selector.register(sock, events)
    elif registered != events:
        selector.modify(sock, events)


def _reset(sock: socket.socket) -> None:
    """Abort the connection: the peer sees a reset, not an orderly close."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def _main(target_port: int, port: int) -> None:
    """Serve the relay; commands on stdin (up, down, freeze, thaw), one reply line each."""
    relay = _Relay(target_port, port)
    commands = {"up": relay.up, "down": relay.down, "freeze": relay.freeze, "thaw": relay.thaw}
    try:
        for line in sys.stdin:
            command = commands.get(line.strip())
            try:
                if command is None:
                    raise ValueError(f"unknown command {line.strip()!r}")
                command()
            except Exception as error:  # reported to the test process
                reply = f"error {type(error).__name__}: {error}"
            else:
                reply = "ok"
            print(reply, flush=True)
    finally:
        relay.stop()


if __name__ == "__main__":
    _main(int(sys.argv[1]), int(sys.argv[2]))
