// The status page: polls the server's /v1/status/... JSON (at paths relative to this page, the
// server's root being "..") and follows a stream live through its own SSE URL.
// Data is only ever put in the page as text (textContent), never as markup.
"use strict";

const TOKEN_KEY = "durable-streams-token";
const SHARD_KEY = "durable-streams-shard"; // a cluster node: whose shard server's status to show
const RELAY = { "Durable-Streams-Redirects": "relay" }; // a cluster node relays, never redirects
const POLL_MS = 1000;
const BASE = new URL("..", document.baseURI); // the server's root, as this page was reached
const $ = (id) => document.getElementById(id);
let timer = null;
let live = null; // the AbortController of the stream page's SSE reader

class NeedsToken extends Error {}

function token() { return sessionStorage.getItem(TOKEN_KEY); }

function status(view, params = {}) {
  const shard = sessionStorage.getItem(SHARD_KEY);
  const query = new URLSearchParams(params);
  if (shard !== null) query.set("shard", shard);
  return "v1/status/" + view + (query.toString() ? "?" + query : "");
}

async function call(path, accept = "application/json") {
  const headers = { Accept: accept, ...RELAY };
  if (token()) headers.Authorization = "Bearer " + token();
  const response = await fetch(new URL(path, BASE), { headers, cache: "no-store" });
  if (response.status === 401) throw new NeedsToken((await response.json()).error.message);
  return response;
}

async function getJson(path) {
  const response = await call(path);
  const body = await response.json();
  if (!response.ok) throw new Error(body.error ? `${body.error.code}: ${body.error.message}` : response.statusText);
  return body;
}

// -- formatting --------------------------------------------------------------------------

function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return (i ? n.toFixed(1) : String(Math.round(n))) + " " + units[i];
}

function ago(ms) {
  if (!ms) return "–";
  const s = Math.max(0, (Date.now() - ms) / 1000);
  if (s < 60) return s.toFixed(0) + " s ago";
  if (s < 3600) return (s / 60).toFixed(0) + " min ago";
  return new Date(ms).toISOString().replace("T", " ").slice(0, 19);
}

function seq(offset) { return Number(offset.split("_")[0]); }

function cell(row, text, numeric = false) {
  const td = document.createElement("td");
  if (text instanceof Node) td.appendChild(text); else td.textContent = text === null || text === undefined ? "–" : String(text);
  if (numeric) td.className = "num";
  row.appendChild(td);
  return td;
}

function fill(tableId, rows, render) {
  const body = $(tableId).tBodies[0];
  body.replaceChildren(...rows.map((item) => { const tr = document.createElement("tr"); render(tr, item); return tr; }));
}

function card(label, value, tone) {
  const div = document.createElement("div");
  div.className = "card";
  const l = document.createElement("div"); l.className = "label"; l.textContent = label;
  const v = document.createElement("div"); v.className = "value" + (tone ? " " + tone : ""); v.textContent = value;
  div.append(l, v);
  return div;
}

function chart(canvas, points, key, format) {
  const ctx = canvas.getContext("2d");
  const { width, height } = canvas;
  ctx.clearRect(0, 0, width, height);
  const values = points.map((p) => p[key]);
  const top = Math.max(1, ...values);
  ctx.fillStyle = "#5d6b7e";
  ctx.font = "11px system-ui, sans-serif";
  if (values.length < 2) { ctx.fillText("collecting: one point per second while this page is open", 4, height / 2); return; }
  ctx.fillText("max " + format(top) + ", now " + format(values[values.length - 1]), 4, 12);
  const first = points[0].at_ms, span = Math.max(1, points[points.length - 1].at_ms - first);
  ctx.strokeStyle = "#1f6feb";
  ctx.lineWidth = 1.5;
  ctx.beginPath();
  points.forEach((p, i) => {
    const x = 4 + ((p.at_ms - first) / span) * (width - 8);
    const y = height - 4 - (p[key] / top) * (height - 22);
    if (i) ctx.lineTo(x, y); else ctx.moveTo(x, y);
  });
  ctx.stroke();
}

// -- views ---------------------------------------------------------------------------------

async function overview() {
  const o = await getJson(status("overview"));
  $("who").textContent = token() ? "token: " + o.token : "";
  const cards = [card("streams", o.streams), card("buckets", o.buckets.length)];
  if (o.whole_server) {
    const s = o.storage, m = o.memory, rates = o.rates, last = rates[rates.length - 1];
    cards.push(
      card("appends/s", last ? last.appends_per_s.toFixed(1) : "–"),
      card("bytes/s", last ? bytes(last.bytes_per_s) + "/s" : "–"),
      card("live readers (long-poll / SSE)", `${o.live_readers.long_poll} / ${o.live_readers.sse}`),
      card("storage", s.degraded ? "degraded: " + s.degraded : "healthy", s.degraded ? "bad" : "ok"),
      card("WAL bytes", bytes(s.wal_bytes)),
      card("unflushed / flush lag", `${bytes(s.unflushed_bytes)} / ${s.flush_lag_s.toFixed(1)} s`),
      card("stored since start", bytes(s.stored_bytes)),
      card("Delta commits (failed)", `${o.delta_commits.count} (${o.delta_commits.failures})`, o.delta_commits.failures ? "bad" : ""),
      card("compactions (failed)", `${o.compaction.count} (${o.compaction.failures})`, o.compaction.failures ? "bad" : ""),
      card("removed by retention", `${o.retention.removed_messages} messages, ${bytes(o.retention.removed_bytes)}`),
      card("memory held / limit", `${bytes(m.held_bytes)} / ${m.limit_bytes ? bytes(m.limit_bytes) : "no limit"}`),
    );
    chart($("chart-appends"), rates, "appends_per_s", (v) => v.toFixed(1));
    chart($("chart-bytes"), rates, "bytes_per_s", (v) => bytes(v) + "/s");
  }
  $("cards").replaceChildren(...cards);
  const select = $("filter-bucket"), chosen = select.value;
  const options = [new Option("all buckets and the base surface", "")].concat(o.buckets.map((b) => new Option(b, b)));
  select.replaceChildren(...options);
  select.value = chosen;
}

function streamLink(name) {
  const a = document.createElement("a");
  a.href = "#/stream/" + encodeURIComponent(name);
  a.textContent = name;
  return a;
}

async function streams() {
  const body = await getJson(status("streams", { q: $("filter-q").value, bucket: $("filter-bucket").value }));
  $("streams-note").textContent = `${body.matched} stream(s)` + (body.truncated ? `, the first ${body.streams.length} shown` : "");
  fill("streams-table", body.streams, (tr, s) => {
    cell(tr, streamLink(s.name));
    cell(tr, s.tail_offset);
    cell(tr, s.messages, true);
    cell(tr, bytes(s.bytes), true);
    cell(tr, ago(s.last_append_at_ms));
    cell(tr, s.status);
    cell(tr, s.ttl_s !== null ? `TTL ${s.ttl_s} s (${s.ttl_remaining_s} s left)` : s.expires_at || "–");
    cell(tr, s.live_readers, true);
  });
}

function messageItem(offset, text, fresh) {
  const li = document.createElement("li");
  if (fresh) li.className = "new";
  const meta = document.createElement("div"); meta.className = "meta"; meta.textContent = offset;
  const pre = document.createElement("pre"); pre.textContent = text;
  li.append(meta, pre);
  return li;
}

function pretty(text, json) {
  if (!json) return text;
  try { return JSON.stringify(JSON.parse(text), null, 2); } catch { return text; }
}

async function streamPage(name) {
  const body = await getJson(status("stream", { name }));
  const s = body.stream, json = s.content_type.toLowerCase().startsWith("application/json");
  $("stream-name").textContent = s.name;
  $("stream-facts").textContent = `${s.content_type} · ${s.messages} message(s) · tail ${s.tail_offset} · ${s.status}`;
  $("messages").replaceChildren(...body.messages.map((m) => messageItem(m.offset, m.text !== undefined ? pretty(m.text, json) : m.hex + (m.size > m.hex.length / 2 ? " …" : ""), false)));
  follow(s, body.next_offset, json);
}

// SSE over fetch (EventSource cannot send an Authorization header).
async function follow(s, offset, json) {
  const controller = new AbortController();
  live = controller;
  const binary = !(json || s.content_type.toLowerCase().startsWith("text/"));
  const url = new URL(s.url.slice(1).split("/").map(encodeURIComponent).join("/") + "?" + new URLSearchParams({ offset, live: "sse" }), BASE);
  const headers = token() ? { Authorization: "Bearer " + token(), ...RELAY } : { ...RELAY };
  $("stream-live").textContent = "following live";
  try {
    while (!controller.signal.aborted) {
      url.searchParams.set("offset", offset);
      const response = await fetch(url, { headers, signal: controller.signal, cache: "no-store" });
      if (!response.ok) { $("stream-live").textContent = `live updates stopped: HTTP ${response.status}`; return; }
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const event = buffer.slice(0, end); buffer = buffer.slice(end + 2);
          const kind = (event.match(/^event:\s?(.*)$/m) || [])[1];
          const data = event.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).replace(/^ /, "")).join("\n");
          if (kind === "control") { const c = JSON.parse(data); offset = c.streamNextOffset; if (c.streamClosed) { $("stream-live").textContent = "stream closed"; return; } }
          if (kind === "data") offset = shown(data, offset, json, binary);
        }
      }
    }
  } catch (error) {
    if (!controller.signal.aborted) $("stream-live").textContent = "live updates stopped: " + error.message;
  }
}

function shown(data, offset, json, binary) {
  let items;
  if (json) items = JSON.parse(data).map((v) => JSON.stringify(v, null, 2));
  else if (binary) items = [Array.from(atob(data).slice(0, 256), (c) => c.charCodeAt(0).toString(16).padStart(2, "0")).join("")];
  else items = [data];
  const first = seq(offset), list = $("messages");
  items.forEach((text, i) => list.appendChild(messageItem(json ? `${String(first + i).padStart(16, "0")}_0000000000000000` : "new data", text, true)));
  return offset;
}

async function consumers() {
  const shard = sessionStorage.getItem(SHARD_KEY);
  const response = await call("v1/consumers" + (shard !== null ? "?shard=" + shard : ""));
  const body = response.ok ? await response.json() : null;
  const rows = body && Array.isArray(body.consumers) ? body.consumers : [];
  $("consumers-note").textContent = rows.length ? `${rows.length} consumer position(s)` :
    "No consumer has recorded progress yet" + (response.ok || response.status === 404 ? "." : ` (the server answered ${response.status}).`);
  fill("consumers-table", rows, (tr, c) => {
    cell(tr, c.consumer); cell(tr, c.stream); cell(tr, c.offset);
    cell(tr, c.lag_messages, true); cell(tr, bytes(c.lag_bytes), true);
    cell(tr, c.lag_seconds === null ? "–" : c.lag_seconds.toFixed(1), true);
  });
}

async function subscriptions() {
  const body = await getJson(status("subscriptions"));
  const c = body.counters;
  $("subscriptions-note").textContent = `${body.subscriptions.length} subscription(s)` +
    (c ? ` · deliveries ${c.deliveries || 0}, failed attempts ${c.delivery_failures || 0}, retries ${c.retries || 0}, expired leases ${c.lease_expiries || 0}` : "");
  fill("subscriptions-table", body.subscriptions, (tr, s) => {
    const w = s.wake;
    cell(tr, s.root); cell(tr, s.id); cell(tr, s.type + (s.pattern ? ` (${s.pattern})` : ""));
    cell(tr, s.streams, true); cell(tr, s.pending_streams, true);
    cell(tr, w ? `generation ${s.generation}` + (w.holder ? `, held by ${w.holder}` : ", not claimed") : "none");
    cell(tr, w && w.lease_expires_ms ? "expires in " + Math.max(0, (w.lease_expires_ms - Date.now()) / 1000).toFixed(0) + " s" : "–");
    cell(tr, s.failing ? `failing: ${w.attempts} attempt(s), next ${ago(w.next_attempt_ms)}` : w && w.delivered ? "delivered" : w ? "pending" : "–");
  });
}

async function cluster() {
  const response = await call("v1/cluster");
  if (!response.ok) {
    sessionStorage.removeItem(SHARD_KEY);
    $("cluster-note").textContent = "Not a cluster: this is a standalone server (it does not answer /v1/cluster).";
    fill("cluster-table", [], () => {});
    return;
  }
  const c = await response.json();
  const shown = sessionStorage.getItem(SHARD_KEY) || "0";
  $("cluster-note").textContent = `node ${c.node_id} · live nodes: ${c.live_nodes.join(", ")} · holds shards ${c.held.join(", ") || "none"} · lease TTL ${c.lease_ttl_s} s · the other views show shard ${shown}`;
  fill("cluster-table", c.shards, (tr, s) => {
    const pick = document.createElement("button");
    pick.type = "button";
    pick.textContent = String(s.shard) === shown ? `shard ${s.shard} (shown)` : `show shard ${s.shard}`;
    pick.addEventListener("click", () => { sessionStorage.setItem(SHARD_KEY, String(s.shard)); cluster(); });
    cell(tr, pick); cell(tr, s.state); cell(tr, s.holder); cell(tr, s.url); cell(tr, failedStart(s.failed_start));
  });
}

function failedStart(f) {  // (this node's last failed start of the shard's server, until the shard is served)
  if (!f) return "";
  const released = f.lease_released ? ", lease let go" : "";
  const why = f.reason ? `: start refused: ${f.reason}` : (f.meaning ? `: ${f.meaning}` : "");
  return `exit ${f.exit_code} (attempt ${f.attempt}, ${f.seconds_ago} s ago${released})` + why;
}

// -- routing -------------------------------------------------------------------------------

const VIEWS = { overview, streams, consumers, subscriptions, cluster };

function decoded(text) {
  try { return decodeURIComponent(text); } catch { return text; }  // a malformed link shows as it is
}

function route() {
  const [, view = "overview", arg] = location.hash.match(/^#\/([a-z]+)\/?(.*)$/) || [];
  return { view: view in VIEWS || view === "stream" ? view : "overview", arg: decoded(arg || "") };
}

async function show() {
  clearTimeout(timer);
  if (live) { live.abort(); live = null; }
  const { view, arg } = route();
  document.querySelectorAll(".view").forEach((el) => { el.hidden = el.id !== "view-" + view; });
  document.querySelectorAll("#nav a").forEach((a) => a.classList.toggle("active", a.dataset.view === (view === "stream" ? "streams" : view)));
  $("forget").hidden = !token();
  try {
    $("login").hidden = true;
    $("error").textContent = "";
    if (view === "stream") { await streamPage(arg); return; }
    await (view === "streams" ? Promise.all([overview(), streams()]) : VIEWS[view]());
    timer = setTimeout(show, POLL_MS);
  } catch (error) {
    if (error instanceof NeedsToken) {
      document.querySelectorAll(".view").forEach((el) => { el.hidden = true; });
      $("login").hidden = false;
      $("login-error").textContent = token() ? error.message : "";
      return;
    }
    $("error").textContent = error.message;
    timer = setTimeout(show, POLL_MS * 3);
  }
}

$("login-form").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $("token").value.trim());
  $("token").value = "";
  show();
});
$("forget").addEventListener("click", () => { sessionStorage.removeItem(TOKEN_KEY); $("who").textContent = ""; show(); });
$("filter-q").addEventListener("input", () => streams().catch(() => {}));
$("filter-bucket").addEventListener("change", () => streams().catch(() => {}));
$("filters").addEventListener("submit", (event) => event.preventDefault());
window.addEventListener("hashchange", show);
show();
