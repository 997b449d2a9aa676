"""A small private network of Linux network namespaces, built for one test run and always
torn down, where links can be cut (``ip link set ... down``) and healed.

Layout (``private_network(nodes)``), every name carrying this run's pid and a random suffix
(``dsf-<pid>-<hex>-...``), so parallel pytest workers never collide::

    root namespace (the test process)          hub namespace: two bridges, no forwarding
      dsf<hex>f  10.231.B.1/25   ---------------- root-f -+
                                                          |  front bridge
      node k's namespace:  f  10.231.B.(10+k)/25 -- nf<k> -+
                           s  10.231.B.(140+k)/25 - ns<k> -+
                                                          |  storage bridge
      store namespace:     s  10.231.B.130/25 ----- st0 ---+
      dsf<hex>s  10.231.B.129/25 ---------------- root-s -+

The addresses are one private /24 (``10.231.B.0/24``, ``B`` chosen at random among those not
on any root interface) that exists only on these links: the front half (``/25``) joins the
nodes, their peers and the test's clients; the back half joins the nodes and the object store.
No namespace has a default route and none forwards, so nothing reaches beyond these links.
The root namespace holds one veth into each bridge: the test's clients reach the nodes over
the front one, and the test creates buckets in the store over the storage one (no node
traffic crosses the root namespace: the hub does not forward, and root has ``ip_forward`` 0).

A cut is the hub's end of a node's veth set down (``cut(k, "front")``): the node's packets on
that link are dropped, as on a switch port that died (connects time out, established
connections stall), and ``heal`` sets it up again.

Teardown kills every process still in one of the namespaces (``ip netns pids``: a namespace
with a process in it outlives its name), then deletes the namespaces, which deletes their
links and bridges, root's veth ends with them. Namespaces of a run whose process is gone
(a pytest killed with ``kill -9``) are swept at the next build.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import random
import re
import secrets
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

Link = Literal["front", "storage"]
PREFIX = "dsf"
_NAME = re.compile(rf"^{PREFIX}-(\d+)-([0-9a-f]+)-")


class NetnsUnavailable(Exception):
    """Network namespaces (or veth pairs, or bridges) cannot be made here; the message says which."""


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``ip <args>``; a failure raises with the command and its stderr."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: exit {done.returncode}: {done.stderr.strip()}")
    return done


def missing_capability() -> str | None:
    """Why this machine cannot build the network (``None``: it can), tried in a throwaway
    namespace: ``ip netns add`` (root, or CAP_SYS_ADMIN), a bridge and a veth pair in it."""
    probe = f"{PREFIX}-{os.getpid()}-{secrets.token_hex(3)}-probe"
    steps = [
        ("`ip netns add` (network namespaces: needs root or CAP_SYS_ADMIN and the ip tool)", ["netns", "add", probe]),
        ("a bridge (`ip link add type bridge`)", ["-n", probe, "link", "add", "name", "b", "type", "bridge"]),
        (
            "a veth pair (`ip link add type veth`)",
            ["-n", probe, "link", "add", "name", "v", "type", "veth", "peer", "name", "w"],
        ),
    ]
    try:
        for what, args in steps:
            try:
                done = ip(*args, check=False)
            except OSError as exc:  # (no ip tool)
                return f"{what} failed: {exc}"
            if done.returncode != 0:
                return f"{what} failed: {done.stderr.strip()}"
        return None
    finally:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            ip("netns", "del", probe, check=False)


@dataclass
class Network:
    """The built network (module docstring): namespaces, addresses, and cutting links."""

    tag: str
    subnet: ipaddress.IPv4Network
    hub: str
    store: str
    nodes: list[str]
    cuts: set[tuple[int, Link]] = field(default_factory=set)

    def _address(self, host: int) -> str:
        return str(self.subnet.network_address + host)

    @property
    def root_front(self) -> str:
        return self._address(1)

    @property
    def store_address(self) -> str:
        """Where the object store listens (in the store namespace)."""
        return self._address(130)

    def front_address(self, node: int) -> str:
        """Node ``node``'s address on the front bridge: the one it serves and advertises."""
        return self._address(10 + node)

    def exec_prefix(self, namespace: str) -> list[str]:
        """The command prefix running a program inside ``namespace``."""
        return ["ip", "netns", "exec", namespace]

    def cut(self, node: int, *links: Link) -> None:
        """Drop every packet of node ``node`` on ``links`` (its hub-side veth ends set down)."""
        for link in links:
            ip("-n", self.hub, "link", "set", _port(node, link), "down")
            self.cuts.add((node, link))

    def heal(self, node: int, *links: Link) -> None:
        for link in links:
            ip("-n", self.hub, "link", "set", _port(node, link), "up")
            self.cuts.discard((node, link))

    def heal_all(self) -> None:
        for node, link in sorted(self.cuts):
            self.heal(node, link)


def namespace_pids(namespace: str) -> list[int]:
    """The processes in ``namespace``."""
    done = ip("netns", "pids", namespace, check=False)
    return [int(pid) for pid in done.stdout.split()]


def _port(node: int, link: Link) -> str:
    return f"{'nf' if link == 'front' else 'ns'}{node}"


def _free_subnet() -> ipaddress.IPv4Network:
    """A ``10.231.B.0/24`` that no root interface has an address in."""
    used = ip("-4", "-o", "addr", "show").stdout + ip("-4", "route", "show", "table", "all").stdout
    choices = [block for block in range(256) if f"10.231.{block}." not in used]
    if not choices:
        raise RuntimeError("every 10.231.B.0/24 is in use on this machine")
    return ipaddress.IPv4Network(f"10.231.{random.choice(choices)}.0/24")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _namespaces() -> list[str]:
    done = ip("netns", "list", check=False)
    return [line.split()[0] for line in done.stdout.splitlines() if line.strip()]


def _remove(namespaces: list[str]) -> None:
    """Kill every process in ``namespaces``, then delete them (their links and bridges go too)."""
    for _ in range(50):
        pids = [pid for namespace in namespaces for pid in namespace_pids(namespace)]
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)  # (a poll in a loop that checks: the killed take a moment to go)
    for namespace in namespaces:
        ip("netns", "del", namespace, check=False)


def sweep_stale() -> None:
    """Remove the namespaces of runs whose process is gone."""
    stale = [name for name in _namespaces() if (found := _NAME.match(name)) and not _alive(int(found.group(1)))]
    if stale:
        _remove(stale)


@contextlib.contextmanager
def private_network(nodes: int) -> Iterator[Network]:
    """Build the network (module docstring) for ``nodes`` nodes; always torn down on exit."""
    sweep_stale()
    token = secrets.token_hex(3)
    tag = f"{PREFIX}-{os.getpid()}-{token}"
    network = Network(
        tag=tag,
        subnet=_free_subnet(),
        hub=f"{tag}-hub",
        store=f"{tag}-store",
        nodes=[f"{tag}-n{index}" for index in range(nodes)],
    )
    created: list[str] = []
    root_links = [f"{PREFIX}{token}f", f"{PREFIX}{token}s"]
    try:
        for namespace in (network.hub, network.store, *network.nodes):
            ip("netns", "add", namespace)
            created.append(namespace)
            ip("-n", namespace, "link", "set", "lo", "up")
        for bridge in ("front", "storage"):
            ip("-n", network.hub, "link", "add", "name", bridge, "type", "bridge")
            ip("-n", network.hub, "link", "set", bridge, "up")

        def wire(port: str, bridge: str, namespace: str | None, name: str, address: str) -> None:
            """A veth from the hub's ``bridge`` (its end ``port``) to ``name`` in ``namespace``
            (the root namespace if ``None``), addressed ``address``/25."""
            inside = ["-n", namespace] if namespace else []
            ip(*inside, "link", "add", "name", name, "type", "veth", "peer", "name", port, "netns", network.hub)
            ip("-n", network.hub, "link", "set", port, "master", bridge)
            ip("-n", network.hub, "link", "set", port, "up")
            ip(*inside, "addr", "add", f"{address}/25", "dev", name)
            ip(*inside, "link", "set", name, "up")

        wire("root-f", "front", None, root_links[0], network.root_front)
        wire("root-s", "storage", None, root_links[1], network._address(129))
        wire("st0", "storage", network.store, "s", network.store_address)
        for index, namespace in enumerate(network.nodes):
            wire(_port(index, "front"), "front", namespace, "f", network.front_address(index))
            wire(_port(index, "storage"), "storage", namespace, "s", network._address(140 + index))
        yield network
    finally:
        _remove(list(reversed(created)))
        for link in root_links:  # (gone with the hub already, unless its creation failed half-way)
            if ip("link", "show", link, check=False).returncode == 0:
                ip("link", "del", link, check=False)
