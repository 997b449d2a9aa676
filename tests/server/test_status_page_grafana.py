"""The Grafana dashboard shipped with the server (``http/ui/grafana/durable-streams.json``)
queries only what the server exports: a real server does appends, reads, a long-poll, an SSE
read, a subscription's wake and a named consumer's progress, ``/metrics`` is scraped, and
every PromQL expression of every panel is parsed for the metric names it selects (and the
labels it matches them on); each name must be an exported sample (a histogram's ``_bucket``,
``_sum`` and ``_count`` are samples of their own) carrying those labels.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import requests
from prometheus_client.parser import text_string_to_metric_families
from servers import ServerProcess, session, wait_for

import durable_streams_server

DASHBOARD = Path(durable_streams_server.__file__).parent / "http" / "ui" / "grafana" / "durable-streams.json"
JSON = {"Content-Type": "application/json"}
SCRAPER_LABELS = frozenset({"instance", "job"})
"""Labels Prometheus adds to every series it scrapes."""
PANEL_TOPICS = ("Throughput", "Latency", "Lag", "Storage", "Subscriptions")

_TOKEN = re.compile(
    r'(?P<string>"(?:[^"\\]|\\.)*")|(?P<variable>\$\w+)|(?P<range>\[[^\]]*\])|(?P<matchers>\{[^}]*\})'
    r"|(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)|(?P<number>\d+(?:\.\d+)?)|(?P<open>\()|(?P<close>\))|(?P<other>\S)"
)
_KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset"})
_KEYWORDS |= frozenset({"and", "or", "unless"})
_MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*,?')


def selectors(expr: str) -> list[tuple[str, frozenset[str]]]:
    """The metric names an expression selects, each with the label names it matches on."""
    found: list[tuple[str, frozenset[str]]] = []
    tokens = [(m.lastgroup, m.group()) for m in _TOKEN.finditer(expr)]
    skip_group = False
    depth_skipped = 0
    for index, (kind, text) in enumerate(tokens):
        if depth_skipped:
            depth_skipped += 1 if kind == "open" else -1 if kind == "close" else 0
            continue
        if skip_group and kind == "open":
            skip_group, depth_skipped = False, 1  # ``by (...)`` / ``without (...)``: label names
            continue
        if kind != "name":
            continue
        following = tokens[index + 1] if index + 1 < len(tokens) else (None, "")
        if text in _KEYWORDS:
            skip_group = text in ("by", "without", "on", "ignoring", "group_left", "group_right")
            continue
        if following[0] == "open" or following[1] in ("by", "without"):
            continue  # a function or an aggregation (``sum by (x) (...)``)
        labels: frozenset[str] = frozenset()
        if following[0] == "matchers":
            inner = following[1][1:-1]
            labels = frozenset(m.group(1) for m in _MATCHER.finditer(inner))
            assert _MATCHER.sub("", inner).strip() == "", f"unparsed matchers in {expr!r}: {inner!r}"
        found.append((text, labels))
    return found


def test_selectors_parse_names_not_functions_labels_or_variables() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, route) (rate(a_bucket{instance=~"$instance",route!~"x|y"}'
        "[$__rate_interval]))) / sum without (mode) (b{}) + on (job) c"
    )
    assert selectors(expr) == [("a_bucket", frozenset({"instance", "route"})), ("b", frozenset()), ("c", frozenset())]


def expressions(dashboard: dict[str, object]) -> Iterator[tuple[str, str]]:
    panels = dashboard["panels"]
    assert isinstance(panels, list)
    for panel in panels:
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]


def exported(server: ServerProcess, http: requests.Session) -> dict[str, set[str]]:
    """Every exported sample name -> the label names its series carry."""
    text = http.get(f"{server.url}/metrics").text
    names: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            names.setdefault(sample.name, set()).update(sample.labels)
    return names


def test_every_dashboard_query_names_exported_metrics(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    titles = [panel["title"] for panel in dashboard["panels"] if panel["type"] == "row"]
    assert [topic for topic in PANEL_TOPICS if topic in titles] == list(PANEL_TOPICS)

    server = server_factory("--flush-interval-ms", "100", "--long-poll-timeout-ms", "300", "--sse-reconnect-ms", "300")
    with session() as http:
        assert http.put(server.stream_url("wake"), data=b"[]", headers=JSON).status_code == 201
        subscription = {"type": "pull-wake", "pattern": "orders/*", "wake_stream": "wake"}
        assert http.put(server.stream_url("__ds/subscriptions/g"), json=subscription).status_code == 201
        url = server.stream_url("orders/1")
        assert http.put(url, data=b"[]", headers=JSON).status_code == 201
        for n in range(5):
            assert http.post(url, data=json.dumps({"n": n}).encode(), headers=JSON).status_code == 204
        assert http.get(url, params={"offset": "-1"}).status_code == 200
        tail = http.head(url).headers["Stream-Next-Offset"]
        assert http.get(url, params={"offset": tail, "live": "long-poll"}).status_code == 204
        assert http.get(url, params={"offset": tail, "live": "sse"}, timeout=30).status_code == 200
        wait_for(lambda: http.get(server.stream_url("wake"), params={"offset": "-1"}).json() != [], timeout_s=60)
        progress = {"offsets": {"orders/1": "0000000000000002_0000000000000000"}}
        assert http.put(server.stream_url("__ds/consumers/etl"), json=progress).status_code == 200
        names = exported(server, http)

    checked = 0
    for title, expr in expressions(dashboard):
        selected = selectors(expr)
        assert selected, f"{title}: no metric in {expr!r}"
        for name, labels in selected:
            assert name in names, f"{title}: {name} is not exported ({expr!r})"
            missing = labels - SCRAPER_LABELS - names[name]
            assert not missing, f"{title}: {name} has no label(s) {sorted(missing)} ({expr!r})"
            checked += 1
    assert checked >= 30
