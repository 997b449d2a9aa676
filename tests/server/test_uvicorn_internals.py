"""The uvicorn internals the fast path and the head guards rely on are still there, as they use them.

``http/fastpath/`` subclasses uvicorn's connection protocols, overrides some of their methods,
calls others, reads and writes their attributes, stands a ``FastCycle`` where uvicorn keeps its
``RequestResponseCycle``, and replicates two of uvicorn's methods in part. None of that is
uvicorn's documented API, so setup.py pins uvicorn to the range this was checked with, and this
test fails, naming the internal, when one changes:

1. the internals are *derived* from the fast path's source (its uvicorn imports; the ``self``
   attributes and ``super()`` calls of its protocol classes that are not their own) and must
   equal the lists below, so a new use of an internal is listed here before it is relied on;
2. each listed internal exists in the installed uvicorn: names importable, methods with the
   parameters the fast path passes or overrides them with, attributes that uvicorn's protocol
   sets on itself;
3. every attribute uvicorn's httptools protocol uses of its cycle is one ``FastCycle`` has;
4. the uvicorn methods the fast path replicates in part still do what was replicated (the
   attributes and calls they reference, compared as a set);
5. uvicorn renews ``server_state.default_headers`` by assigning a new list (``DefaultLines``
   renders once per list object), and builds its loaded app as the fast path unwraps it.

The range in setup.py is where this passes along with the fast path's own tests: uvicorn 0.53.0
and 0.54.0 (before 0.53 ``on_headers_complete`` decides keep-alive without the parser's
``should_keep_alive``, before 0.45 there is no ``_start_asgi_task``: this test names both), and
httptools 0.6.4, 0.7.1, 0.8.0 and 0.9.0.

Also the httptools parser the fast path asks through uvicorn's protocol; and nothing outside
``http/fastpath/`` imports uvicorn's internals, nothing in ``http/`` imports ``http/fastpath/``
(the arrows point one way).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap
from pathlib import Path

import httptools
import pytest
import uvicorn
from uvicorn.protocols.http import h11_impl, httptools_impl

import durable_streams_server
from durable_streams_server.http import fastpath
from durable_streams_server.http.fastpath.cycle import FastCycle

FASTPATH = Path(fastpath.__file__).parent
SERVER = Path(durable_streams_server.__file__).parent

IMPORTED = {
    "uvicorn.middleware.proxy_headers": {"ProxyHeadersMiddleware"},
    "uvicorn.protocols.http.flow_control": {"FlowControl"},
    "uvicorn.protocols.http.h11_impl": {"H11Protocol"},
    "uvicorn.protocols.http.httptools_impl": {"HttpToolsProtocol", "RequestResponseCycle", "STATUS_LINE"},
    "uvicorn.protocols.utils": {"get_client_addr", "get_path_with_query_string"},
}
"""What the fast path imports from uvicorn."""

USED = {
    "HttpToolsProtocol": {
        # methods overridden or called
        "connection_lost",
        "connection_made",
        "data_received",
        "on_headers_complete",
        "on_message_complete",
        "on_response_complete",
        "send_400_response",
        "shutdown",
        "_start_asgi_task",
        "_unset_keepalive_if_required",
        # attributes
        "access_log",
        "app",
        "client",
        "connections",
        "cycle",
        "expect_100_continue",
        "flow",
        "limit_concurrency",
        "loop",
        "parser",
        "pipeline",
        "root_path",
        "scope",
        "server",
        "server_state",
        "tasks",
        "timeout_keep_alive",
        "transport",
        "url",
    },
    "H11Protocol": {
        "connection_lost",
        "connection_made",
        "handle_events",
        "on_response_complete",
        "shutdown",
        "loop",
        "scope",
        "transport",
    },
}
"""What the fast path's protocol classes use of uvicorn's, by the uvicorn class they build on."""

PARAMETERS = {
    ("HttpToolsProtocol", "connection_made"): ["transport"],
    ("HttpToolsProtocol", "connection_lost"): ["exc"],
    ("HttpToolsProtocol", "data_received"): ["data"],
    ("HttpToolsProtocol", "send_400_response"): ["msg"],
    ("HttpToolsProtocol", "on_headers_complete"): [],
    ("HttpToolsProtocol", "on_message_complete"): [],
    ("HttpToolsProtocol", "on_response_complete"): [],
    ("HttpToolsProtocol", "_start_asgi_task"): ["cycle", "app"],
    ("HttpToolsProtocol", "_unset_keepalive_if_required"): [],
    ("HttpToolsProtocol", "shutdown"): [],
    ("H11Protocol", "connection_made"): ["transport"],
    ("H11Protocol", "connection_lost"): ["exc"],
    ("H11Protocol", "handle_events"): [],
    ("H11Protocol", "on_response_complete"): [],
    ("H11Protocol", "shutdown"): [],
}

REPLICATED = {
    "on_response_complete": {
        # FastPathProtocol._next_request: uvicorn's, with a ClosingDeadline for the keep-alive timer
        "_start_asgi_task",
        "_unset_keepalive_if_required",
        "call_later",
        "flow",
        "is_closing",
        "loop",
        "pipeline",
        "pop",
        "resume_reading",
        "server_state",
        "timeout_keep_alive",
        "timeout_keep_alive_handler",
        "timeout_keep_alive_task",
        "total_requests",
        "transport",
    },
    "on_headers_complete": {
        # FastPathProtocol._serve: the scope, the concurrency limit, the upgrade, the cycle, the pipeline
        "RequestResponseCycle",
        "_should_upgrade",
        "_start_asgi_task",
        "access_log",
        "access_logger",
        "appendleft",
        "connections",
        "cycle",
        "decode",
        "default_headers",
        "encode",
        "expect_100_continue",
        "flow",
        "get_http_version",
        "get_method",
        "limit_concurrency",
        "logger",
        "on_response_complete",
        "parse",
        "parse_url",
        "parser",
        "path",
        "pause_reading",
        "pipeline",
        "query",
        "response_complete",
        "root_path",
        "scope",
        "server_state",
        "should_keep_alive",
        "should_upgrade",
        "tasks",
        "transport",
        "unquote",
        "url",
        "warning",
        "app",
        "Event",
    },
}
"""The attributes and calls uvicorn's httptools methods reference, for the two the fast path
replicates in part: a change here means uvicorn's method changed and the copy must be reviewed."""

SCOPE_KEYS = {"method", "http_version", "path", "raw_path", "query_string"}
"""What uvicorn's ``on_headers_complete`` puts in the scope (``FastPathProtocol._serve`` sets the same)."""


def _parse(source: str) -> ast.Module:
    """``ast.parse``, asked again when CPython 3.11 raises ``SystemError: AST constructor recursion
    depth mismatch``: its ``_ast`` module keeps the conversion's recursion depth in state shared by
    the process's threads, and a conversion that fails leaves it off (CPython gh-106905: fixed in
    3.12, not in 3.11), so a parse elsewhere in the test process (3.11's traceback module parses to
    place its carets; threads left by earlier tests print tracebacks) breaks this one's count. CI met
    it once in about 2,000 tests. The same source is parsed again: only the interpreter's spurious
    error is retried, never a wrong tree."""
    for attempt in range(5):
        try:
            return ast.parse(source)
        except SystemError as error:
            if "recursion depth mismatch" not in str(error) or attempt == 4:
                raise
    raise AssertionError("unreachable")


def _tree(path: Path) -> ast.Module:
    return _parse(path.read_text(encoding="utf-8"))


def _class_source(cls: type) -> ast.ClassDef:
    node = _parse(textwrap.dedent(inspect.getsource(cls))).body[0]
    assert isinstance(node, ast.ClassDef)
    return node


def _method(cls: type, name: str) -> ast.FunctionDef:
    for node in _class_source(cls).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise AssertionError(f"uvicorn's {cls.__name__}.{name} is gone")


def _fastpath_classes() -> dict[str, tuple[ast.ClassDef, str]]:
    """The fast path's classes that build on uvicorn's protocols, and the uvicorn class each does."""
    classes: dict[str, ast.ClassDef] = {}
    for path in FASTPATH.glob("*.py"):
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.ClassDef):
                classes[node.name] = node
    found: dict[str, tuple[ast.ClassDef, str]] = {}

    def root(name: str) -> str | None:
        if name in USED:
            return name
        node = classes.get(name)
        for base in node.bases if node is not None else []:
            if isinstance(base, ast.Name) and (found_root := root(base.id)) is not None:
                return found_root
        return None

    for name, node in classes.items():
        uvicorn_class = root(name)
        if uvicorn_class is not None and name not in USED:
            found[name] = (node, uvicorn_class)
    return found


def _own_names(classes: list[ast.ClassDef]) -> set[str]:
    """Methods and class-level attributes the fast path's classes define themselves."""
    names: set[str] = set()
    for node in classes:
        for item in node.body:
            if isinstance(item, ast.FunctionDef):
                names.add(item.name)
            elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                names.add(item.target.id)
            elif isinstance(item, ast.Assign):
                names.update(target.id for target in item.targets if isinstance(target, ast.Name))
    return names


def _used_of_uvicorn() -> dict[str, set[str]]:
    """What the fast path's protocol classes use of uvicorn's: ``self.X`` and ``super().X`` that
    none of them defines, and the methods they override."""
    by_uvicorn: dict[str, list[ast.ClassDef]] = {}
    for node, uvicorn_class in _fastpath_classes().values():
        by_uvicorn.setdefault(uvicorn_class, []).append(node)
    used: dict[str, set[str]] = {}
    for uvicorn_class, nodes in by_uvicorn.items():
        own = _own_names(nodes)
        names: set[str] = set()
        for node in nodes:
            for item in ast.walk(node):
                if isinstance(item, ast.Attribute):
                    value = item.value
                    is_self = isinstance(value, ast.Name) and value.id == "self"
                    is_super = (
                        isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "super"
                    )
                    if (is_self and item.attr not in own) or is_super:
                        names.add(item.attr)
            overridden = {item.name for item in node.body if isinstance(item, ast.FunctionDef)}
            names |= {name for name in overridden if hasattr(_uvicorn_class(uvicorn_class), name)}
        used[uvicorn_class] = names
    return used


def _uvicorn_class(name: str) -> type:
    return {"HttpToolsProtocol": httptools_impl.HttpToolsProtocol, "H11Protocol": h11_impl.H11Protocol}[name]


def _instance_attributes(cls: type) -> set[str]:
    """The attributes uvicorn's class sets on itself (``self.X = ...`` in any of its methods)."""
    names: set[str] = set()
    for node in ast.walk(_class_source(cls)):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets = [node.target]
        for target in targets:
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
                names.add(target.attr)
    return names


def _referenced(node: ast.AST) -> set[str]:
    names = {item.attr for item in ast.walk(node) if isinstance(item, ast.Attribute)}
    return names | {item.id for item in ast.walk(node) if isinstance(item, ast.Name) and item.id[0].isupper()}


def test_the_fast_paths_uvicorn_imports_are_the_listed_ones() -> None:
    imported: dict[str, set[str]] = {}
    for path in FASTPATH.glob("*.py"):
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("uvicorn"):
                imported.setdefault(node.module or "", set()).update(alias.name for alias in node.names)
    assert imported == IMPORTED, "the fast path's uvicorn imports changed: list them in IMPORTED and check them"


@pytest.mark.parametrize(("module", "name"), sorted((m, n) for m, names in IMPORTED.items() for n in names))
def test_each_imported_name_is_in_uvicorn(module: str, name: str) -> None:
    assert hasattr(importlib.import_module(module), name), f"uvicorn {uvicorn.__version__}: {module}.{name} is gone"


def test_what_the_protocol_classes_use_of_uvicorns_is_the_listed_ones() -> None:
    used = _used_of_uvicorn()
    for uvicorn_class, names in USED.items():
        assert used[uvicorn_class] == names, (
            f"the fast path's use of uvicorn's {uvicorn_class} changed: "
            f"new {sorted(used[uvicorn_class] - names)}, no longer {sorted(names - used[uvicorn_class])}"
        )


@pytest.mark.parametrize(("uvicorn_class", "name"), sorted((c, n) for c, names in USED.items() for n in names))
def test_each_used_method_or_attribute_is_uvicorns(uvicorn_class: str, name: str) -> None:
    cls = _uvicorn_class(uvicorn_class)
    assert hasattr(cls, name) or name in _instance_attributes(cls), (
        f"uvicorn {uvicorn.__version__}: {uvicorn_class}.{name} is gone (the fast path uses it)"
    )


@pytest.mark.parametrize(("key", "parameters"), sorted(PARAMETERS.items()))
def test_each_used_method_takes_the_parameters_the_fast_path_passes(
    key: tuple[str, str], parameters: list[str]
) -> None:
    uvicorn_class, name = key
    signature = inspect.signature(getattr(_uvicorn_class(uvicorn_class), name))
    assert list(signature.parameters)[1:] == parameters, (
        f"uvicorn {uvicorn.__version__}: {uvicorn_class}.{name}{signature} (the fast path passes {parameters})"
    )


def test_every_attribute_uvicorns_protocol_uses_of_its_cycle_is_one_fast_cycle_has() -> None:
    """uvicorn's httptools protocol keeps a ``FastCycle`` as its ``cycle`` and in its ``pipeline``."""
    used: set[str] = set()
    for node in ast.walk(_class_source(httptools_impl.HttpToolsProtocol)):
        if isinstance(node, ast.Attribute):
            value = node.value
            if isinstance(value, ast.Attribute) and value.attr == "cycle":
                used.add(node.attr)  # self.cycle.X
            elif isinstance(value, ast.Name) and value.id in ("cycle", "existing_cycle"):
                used.add(node.attr)  # cycle.X
    assert used, "found no use of the cycle in uvicorn's protocol: this test no longer sees it"
    has = set(FastCycle.__slots__) | {name for name in dir(FastCycle) if not name.startswith("__")}
    assert used <= has, f"uvicorn {uvicorn.__version__} uses these of its cycle, FastCycle lacks them: {used - has}"


@pytest.mark.parametrize("name", sorted(REPLICATED))
def test_the_replicated_methods_of_uvicorn_are_unchanged(name: str) -> None:
    referenced = _referenced(_method(httptools_impl.HttpToolsProtocol, name))
    assert referenced == REPLICATED[name], (
        f"uvicorn {uvicorn.__version__}: HttpToolsProtocol.{name} changed (now also "
        f"{sorted(referenced - REPLICATED[name])}, no longer {sorted(REPLICATED[name] - referenced)}); "
        "the fast path replicates it (fastpath/protocol.py): review"
    )


def test_uvicorns_scope_keys_are_the_ones_the_fast_path_sets() -> None:
    keys = set()
    for node in ast.walk(_method(httptools_impl.HttpToolsProtocol, "on_headers_complete")):
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "scope"
            and isinstance(node.slice, ast.Constant)
        ):
            keys.add(node.slice.value)
    assert keys == SCOPE_KEYS, f"uvicorn {uvicorn.__version__} sets these scope keys at a head: {sorted(keys)}"


def test_uvicorn_renews_its_default_headers_by_assigning_a_new_list() -> None:
    """``DefaultLines`` renders ``server_state.default_headers`` once per list object: uvicorn must
    replace the list (each second, for the date), never change it in place."""
    from uvicorn.server import Server, ServerState

    assert ServerState().default_headers == []
    writes = [
        node
        for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(Server))))
        if isinstance(node, ast.Attribute) and node.attr == "default_headers" and isinstance(node.ctx, ast.Store)
    ]
    assert writes, f"uvicorn {uvicorn.__version__}: Server no longer assigns server_state.default_headers"
    changed_in_place = [
        node
        for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(Server))))
        if isinstance(node, ast.AugAssign) and getattr(node.target, "attr", None) == "default_headers"
    ]
    assert not changed_in_place


def test_uvicorn_loads_the_app_as_the_fast_path_unwraps_it() -> None:
    """``protocol._fast_path``: the app uvicorn runs is the one given, or it in the proxy-headers middleware."""
    from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

    async def app(scope: object, receive: object, send: object) -> None:
        pass

    plain = uvicorn.Config(app, proxy_headers=False)
    plain.load()
    assert plain.loaded_app is app
    proxied = uvicorn.Config(app)
    proxied.load()
    assert isinstance(proxied.loaded_app, ProxyHeadersMiddleware) and proxied.loaded_app.app is app


def test_a_copy_of_uvicorns_proxy_headers_middleware_rewrites_a_scope_in_one_step() -> None:
    """``fastpath.forwarded.Forwarded``: the middleware keeps its inner app in ``app`` (replaced in a
    copy) and rewrites the scope before calling it, without waiting."""
    from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

    from durable_streams_server.http.fastpath.forwarded import Forwarded

    async def app(scope: object, receive: object, send: object) -> None:
        raise AssertionError("the copy must not call the original app")

    middleware = ProxyHeadersMiddleware(app, trusted_hosts="127.0.0.1")  # type: ignore[arg-type]
    assert middleware.app is app
    headers = [(b"x-forwarded-for", b"203.0.113.7, 10.0.0.2"), (b"x-forwarded-proto", b"https")]
    trusted = {"type": "http", "client": ("127.0.0.1", 5), "scheme": "http", "headers": headers}
    Forwarded(middleware).apply(trusted)
    assert (trusted["client"], trusted["scheme"]) == (("10.0.0.2", 0), "https")
    untrusted = {"type": "http", "client": ("192.0.2.1", 5), "scheme": "http", "headers": headers}
    Forwarded(middleware).apply(untrusted)
    assert (untrusted["client"], untrusted["scheme"]) == (("192.0.2.1", 5), "http")
    assert middleware.app is app  # (the original is left as it was)


def test_the_httptools_parser_has_what_the_fast_path_asks_of_uvicorns() -> None:
    """``FastPathProtocol._serve`` asks the parser uvicorn made (``self.parser``) what uvicorn's
    ``on_headers_complete`` does, and parses the URL as it does."""
    parser = httptools.HttpRequestParser(object())
    for name in ("get_method", "get_http_version", "should_upgrade", "should_keep_alive"):
        assert callable(getattr(parser, name, None)), f"httptools {httptools.__version__}: HttpRequestParser.{name}"
    url = httptools.parse_url(b"/v1/stream/a%20b?offset=-1")
    assert (url.path, url.query) == (b"/v1/stream/a%20b", b"offset=-1")
    assert httptools.parse_url(b"/x").query is None


def test_only_the_fast_path_imports_uvicorns_internals_and_nothing_in_http_imports_it() -> None:
    for path in SERVER.rglob("*.py"):
        inside = FASTPATH in path.parents
        for node in ast.walk(_tree(path)):
            modules: list[str] = []
            if isinstance(node, ast.ImportFrom):
                modules = [("." * node.level) + (node.module or "")]
            elif isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            for module in modules:
                if not inside:
                    assert not module.startswith("uvicorn."), f"{path} imports uvicorn's {module}"
                if path.parent == SERVER / "http":
                    assert "fastpath" not in module, f"{path} imports the fast path ({module})"
