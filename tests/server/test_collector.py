"""The cyclic collector's settings (``collector.py``): start-up objects frozen by the standalone
server once its app has started, and a stream without messages in memory two containers."""

from __future__ import annotations

import gc
import re
import subprocess
import sys

import pyarrow as pa
import requests
from servers import ServerProcess

from durable_streams_server.engine.memory_tail import MemoryTail
from durable_streams_server.storage.message_batch import MessageBatch


def test_freezing_collects_first_and_freezes_what_is_alive() -> None:
    # (in a process of its own: frozen objects would stay frozen in this one)
    script = (
        "import gc, weakref\n"
        "gc.disable()  # (only the freezing collects)\n"
        "from durable_streams_server.collector import freeze_start_up_objects\n"
        "class Cycle:\n"
        "    me: object = None\n"
        "garbage = Cycle(); garbage.me = garbage; dead = weakref.ref(garbage); del garbage\n"
        "alive = Cycle(); alive.me = alive\n"
        "frozen = freeze_start_up_objects()\n"
        "assert dead() is None, 'garbage frozen instead of collected'\n"
        "assert frozen == gc.get_freeze_count() > 1000, frozen\n"
        "assert not any(o is alive for o in gc.get_objects()), 'alive still scanned'\n"
        "print(frozen)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 1000


def test_the_server_freezes_its_start_up_objects_once_started(server: ServerProcess) -> None:
    url = server.stream_url("frozen")
    assert requests.put(url, timeout=10).status_code == 201  # (it serves afterwards)
    started = re.findall(r"msg=started frozen_objects=(\d+)", server.log_text())
    assert len(started) == 1, server.log_text()[-2000:]
    assert int(started[0]) > 10_000  # the libraries and the app, not a handful


def test_an_empty_tail_holds_no_list_for_the_collector() -> None:
    tail = MemoryTail()
    assert tail._chunks == () and tail._firsts == ()
    tail.add(5, (b"a", b"bc"), 1)
    tail.add(7, MessageBatch(pa.array([b"d"], pa.binary())), 2)
    assert gc.is_tracked(tail._chunks) and len(tail._chunks) == 2
    assert [tail.get(seq) for seq in (5, 6, 7)] == [b"a", b"bc", b"d"]
    tail.drop(1)
    assert (len(tail), tail.get(6), list(tail._firsts)) == (2, b"bc", [6, 7])
    tail.drop(2)
    assert (len(tail), tail._chunks, tail._firsts) == (0, (), ())
    tail.add(8, (b"e",), 3)  # (and it fills again)
    assert (len(tail), tail.get(8), tail._firsts) == (1, b"e", ())


def test_one_message_in_memory_is_one_container_beside_the_tail() -> None:
    """A stream woken for one append holds its message without a list of chunks, a list of
    messages or arrays (each one more container for every full collection to scan)."""
    tail = MemoryTail()
    tail.add(3, (b"only",), 7)
    assert len(_containers(tail)) == 1, _containers(tail)
    tail.add(4, (b"next",), 8)  # (a second message: one chunk of lists, still no list of chunks)
    assert tail._firsts == () and [tail.get(3), tail.get(4)] == [b"only", b"next"]
    assert len(_containers(tail)) == 3, _containers(tail)  # (the chunk, its messages, their times)
    tail.drop(1)
    assert (len(tail), tail.get(4), tail._firsts) == (1, b"next", ())


def _containers(root: object) -> list[object]:
    """The containers the collector scans below ``root`` (classes aside)."""
    found, todo = [], [root]
    while todo:
        for referent in gc.get_referents(todo.pop()):
            if gc.is_tracked(referent) and not isinstance(referent, type):
                found.append(referent)
                todo.append(referent)
    return found
