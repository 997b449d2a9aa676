# Databricks notebook source
# MAGIC %md
# MAGIC # Without Spark: the Python client and the `durable-streams` command line
# MAGIC
# MAGIC Services, scripts and operators read and write the same streams as the Spark jobs, without Spark:
# MAGIC
# MAGIC * `pyspark_durable_streams.client`: a synchronous client (`requests`), for this project's server or any other
# MAGIC   that speaks the Durable Streams protocol. Without extras (`pip install .` in a checkout) the package installs
# MAGIC   just the client and the command line, which need only `requests`, `sseclient-py` and `tqdm`.
# MAGIC * `durable-streams`: the command line over it (`durable-streams --help`).
# MAGIC
# MAGIC Nothing here touches `spark`. **Widgets**: `server_url`, `token`, `ca_cert_file`,
# MAGIC `stream` (a name under `/v1/stream/`; the notebook
# MAGIC deletes and re-creates it, and closes it at the end), `events`.
# MAGIC `token` (the bearer token, when the server has `--auth-tokens-file`) and `ca_cert_file` (a CA file for an
# MAGIC `https://` server with a self-signed certificate; a path every node can read) connect to a remote server: see
# MAGIC the quickstart notebook for setting one up.

# COMMAND ----------

# ruff: noqa: F821, E402  (dbutils, display: Databricks globals; imports sit in the cells using them)
dbutils.widgets.text("server_url", "http://127.0.0.1:4437", "Server URL")
dbutils.widgets.text("token", "", "Bearer token (empty: none)")
dbutils.widgets.text("ca_cert_file", "", "CA file for https:// (empty: the system's CAs)")
dbutils.widgets.text("stream", "client-demo-events", "Stream name")
dbutils.widgets.text("events", "200", "Events to write")

server_url = dbutils.widgets.get("server_url").rstrip("/")
token = dbutils.widgets.get("token") or None  # better: dbutils.secrets.get("<scope>", "<key>")
ca_cert_file = dbutils.widgets.get("ca_cert_file") or None
path = f"v1/stream/{dbutils.widgets.get('stream')}"
events = int(dbutils.widgets.get("events"))

# COMMAND ----------

# MAGIC %md
# MAGIC ## Write with an idempotent producer
# MAGIC
# MAGIC The producer batches messages into few requests, keeps several in flight, and retries with the same producer id,
# MAGIC epoch and sequence numbers, so the server stores each message once even when a request is retried.

# COMMAND ----------

import contextlib

from pyspark_durable_streams.client import Client, NotFound, Producer

client = Client(server_url, token=token, verify=ca_cert_file)
stream = client.stream(path)
with contextlib.suppress(NotFound):
    stream.delete()
stream.create("application/json")

with Producer(stream, "client-notebook", epoch=0, linger=0.005, max_in_flight=4) as producer:
    for i in range(events):
        producer.send_json({"event": i, "kind": ["click", "view", "buy"][i % 3]})
stats = producer.stats()
print(f"{stats.messages_acked} messages in {stats.batches_acked} requests; tail {stats.last_offset}")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Read, remember where you stopped, resume
# MAGIC
# MAGIC A catch-up read stops at the current end. `reader.offset` is where to resume: store it with your own state, and
# MAGIC the next read returns exactly what came after.

# COMMAND ----------

import pandas as pd

with stream.read("-1") as reader:
    history = pd.DataFrame([message.json() for message in reader])
    checkpoint = reader.offset
display(history.groupby("kind").size().rename("events").reset_index())

stream.append_json_batch([{"event": events + i, "kind": "refund"} for i in range(10)])
resumed = [message.json() for message in stream.read(checkpoint)]
print(f"{len(history)} events, then {len(resumed)} new ones after {checkpoint}")

# COMMAND ----------

# MAGIC %md
# MAGIC ## The command line
# MAGIC
# MAGIC In a terminal: `durable-streams --url http://host:4437 head v1/stream/…`. Here it runs through Python (a
# MAGIC `%sh` cell would not see the notebook's variables); `python -m pyspark_durable_streams.client.cli` is the same
# MAGIC program.
# MAGIC JSON streams print one JSON value per line; summaries and offsets go to stderr, so stdout stays data.

# COMMAND ----------

import json
import os
import subprocess
import sys


def durable_streams(*args: str, stdin: bytes = b"") -> tuple[str, str]:
    """`durable-streams --url <server_url> <args>`: returns its stdout and stderr.

    The token and CA file go in the environment (DURABLE_STREAMS_TOKEN, DURABLE_STREAMS_CA_CERT), not on the
    command line, where other processes could see them."""
    command = [sys.executable, "-m", "pyspark_durable_streams.client.cli", "--url", server_url, *args]
    env = dict(os.environ)
    for name, value in {"DURABLE_STREAMS_TOKEN": token, "DURABLE_STREAMS_CA_CERT": ca_cert_file}.items():
        if value is not None:
            env[name] = value
    done = subprocess.run(command, input=stdin, capture_output=True, check=True, timeout=60, env=env)
    return done.stdout.decode(), done.stderr.decode()


head = json.loads(durable_streams("head", path, "--json")[0])
print(head)
lines = "".join(json.dumps({"event": f"cli-{i}", "kind": "cli"}) + "\n" for i in range(3))
print(durable_streams("append", path, "--json-lines", stdin=lines.encode())[1])
new_lines, _ = durable_streams("tail", path, "--offset", head["next_offset"])
print(new_lines)
everything, resume = durable_streams("cat", path, "--print-offset")
print(len(everything.splitlines()), "lines;", resume)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Follow live
# MAGIC
# MAGIC `live="sse"` (or `"long-poll"`) keeps reading as messages arrive; the client reconnects when the server ends an
# MAGIC SSE connection, and the read ends when the stream is closed. A writer thread appends a few events and closes it.

# COMMAND ----------

import threading


def writer() -> None:
    try:
        for i in range(5):
            stream.append_json({"event": f"live-{i}", "kind": "live"})
    finally:
        stream.close()


tail = stream.metadata().next_offset
thread = threading.Thread(target=writer)
thread.start()
with stream.read(tail, live="sse") as reader:
    live = [message.json()["event"] for message in reader]
thread.join()
print(live, "closed:", reader.closed)
client.close()
