# Databricks notebook source
# MAGIC %md
# MAGIC # Snapshots and bootstrap: compact a stream's history into its state
# MAGIC
# MAGIC A stream of inventory movements (`{"sku": …, "qty": ±n}`) grows forever, but a consumer needs only the
# MAGIC stock per SKU. This notebook
# MAGIC
# MAGIC 1. materializes the state with Spark, up to a known offset, and **publishes it as a snapshot** of the stream;
# MAGIC 2. **rebuilds a consumer from `/bootstrap`**: the snapshot, then only the messages after it;
# MAGIC 3. lets the consumer **continue tailing** live while a writer appends, until the writer closes the stream.
# MAGIC
# MAGIC Snapshots, bootstrap and buckets are extensions of the protocol that this project's server implements.
# MAGIC Publishing a snapshot moves the stream's retention point: reads of the history before it answer `410 Gone`.
# MAGIC
# MAGIC **Widgets**: `server_url`, `token`, `ca_cert_file`;
# MAGIC `bucket` and `stream` (the notebook deletes and re-creates the stream, so each run
# MAGIC starts from scratch); `movements` (appended before the snapshot); `later_movements` (appended after it);
# MAGIC `live_movements` (appended while the consumer tails).
# MAGIC `token` (the bearer token, when the server has `--auth-tokens-file`) and `ca_cert_file` (a CA file for an
# MAGIC `https://` server with a self-signed certificate; a path every node can read) connect to a remote server: see
# MAGIC the quickstart notebook for setting one up.

# COMMAND ----------

# ruff: noqa: F821, E402  (spark, dbutils, display: Databricks globals; imports sit in the cells using them)
dbutils.widgets.text("server_url", "http://127.0.0.1:4437", "Server URL")
dbutils.widgets.text("token", "", "Bearer token (empty: none)")
dbutils.widgets.text("ca_cert_file", "", "CA file for https:// (empty: the system's CAs)")
dbutils.widgets.text("bucket", "inventory", "Bucket")
dbutils.widgets.text("stream", "warehouse-1", "Stream")
dbutils.widgets.text("movements", "400", "Movements before the snapshot")
dbutils.widgets.text("later_movements", "40", "Movements after the snapshot")
dbutils.widgets.text("live_movements", "25", "Movements while the consumer tails")

server_url = dbutils.widgets.get("server_url").rstrip("/")
token = dbutils.widgets.get("token") or None  # better: dbutils.secrets.get("<scope>", "<key>")
ca_cert_file = dbutils.widgets.get("ca_cert_file") or None
connection = {"token": token, "caCertFile": ca_cert_file}  # the connector's connection options
connection = {name: value for name, value in connection.items() if value is not None}
movements = int(dbutils.widgets.get("movements"))
later_movements = int(dbutils.widgets.get("later_movements"))
live_movements = int(dbutils.widgets.get("live_movements"))

# COMMAND ----------

import contextlib
import json

from pyspark_durable_streams.client import Client, Gone, NotFound

client = Client(server_url, token=token, verify=ca_cert_file)
bucket = client.bucket(dbutils.widgets.get("bucket"))
bucket.create(exist_ok=True)
stream = bucket.stream(dbutils.widgets.get("stream"))
with contextlib.suppress(NotFound):
    stream.delete()
stream.create("application/json")


def movement(i: int) -> dict[str, str | int]:
    """The i-th movement: deterministic, so that the results can be checked."""
    return {"sku": f"sku-{i % 6}", "qty": (i * 7) % 11 - 4}


stream.append_json_batch([movement(i) for i in range(movements)])
print(stream.url, "holds", movements, "movements")

# COMMAND ----------

# MAGIC %md
# MAGIC ## 1. Materialize with Spark and publish the snapshot
# MAGIC
# MAGIC The batch read stops at a fixed offset (`endingOffsets`), the stream's tail taken just before: the state is
# MAGIC exactly "everything before that offset", which is what a snapshot at that offset means, even if writers keep
# MAGIC appending meanwhile.

# COMMAND ----------

from pyspark.sql import functions as F

snapshot_offset = stream.metadata().next_offset
stock = (
    spark.read.format("durable_streams")
    .schema("sku string, qty long")
    .option("url", stream.url)
    .options(**connection)
    .option("endingOffsets", json.dumps({stream.url: snapshot_offset}))
    .load()
    .groupBy("sku")
    .agg(F.sum("qty").alias("stock"))
    .orderBy("sku")
)
display(stock)
state = {row["sku"]: row["stock"] for row in stock.collect()}
stream.snapshots.publish(snapshot_offset, json.dumps(state).encode(), content_type="application/json")
print("published a snapshot at", snapshot_offset)

# COMMAND ----------

# MAGIC %md
# MAGIC The history before the snapshot is no longer served (the server's compaction deletes it), and writers go on.

# COMMAND ----------

stream.append_json_batch([movement(i) for i in range(movements, movements + later_movements)])
try:
    list(stream.read("-1"))
except Gone as error:
    print("reading from the beginning:", error.status, "Gone")

# COMMAND ----------

# MAGIC %md
# MAGIC ## 2. Rebuild a consumer from `/bootstrap`
# MAGIC
# MAGIC One request returns the latest snapshot and every message after it (`multipart/mixed`), and the offset to
# MAGIC continue from.

# COMMAND ----------

with stream.bootstrap() as boot:
    rebuilt = json.loads(boot.snapshot.data)
    replayed = 0
    for message in boot.messages:
        change = message.json()
        rebuilt[change["sku"]] = rebuilt.get(change["sku"], 0) + change["qty"]
        replayed += 1
    resume_offset = boot.next_offset
print(f"snapshot at {boot.snapshot.offset} + {replayed} later messages; continue from {resume_offset}")
print(rebuilt)

# COMMAND ----------

# MAGIC %md
# MAGIC Spark readers get the same view: a query that starts at `earliest` on a stream with a snapshot starts at its
# MAGIC bootstrap, so it reads only the messages after the snapshot.

# COMMAND ----------

after_snapshot = spark.read.format("durable_streams").option("url", stream.url).options(**connection).load().count()
print(after_snapshot, "messages after the snapshot")

# COMMAND ----------

# MAGIC %md
# MAGIC ## 3. Continue tailing
# MAGIC
# MAGIC The consumer follows the stream from `resume_offset` with long-polls, while a writer (a thread here, any
# MAGIC process in real life) appends and finally closes the stream. Closing is the stream's end-of-file: the live
# MAGIC read ends when it gets there, with no timeout involved.

# COMMAND ----------

import threading


def writer() -> None:
    try:
        for i in range(movements + later_movements, movements + later_movements + live_movements):
            stream.append_json(movement(i))
    finally:
        stream.close()


thread = threading.Thread(target=writer)
thread.start()
live = 0
with stream.read(resume_offset, live="long-poll") as reader:
    for message in reader:
        change = message.json()
        rebuilt[change["sku"]] = rebuilt.get(change["sku"], 0) + change["qty"]
        live += 1
thread.join()
print(f"{live} live messages; the stream is closed: {reader.closed}")
display(spark.createDataFrame(sorted(rebuilt.items()), "sku string, stock long"))
client.close()
