# Databricks notebook source
# MAGIC %md
# MAGIC # Backfill on a fork: re-run a batch job on corrected history, beside production
# MAGIC
# MAGIC A stream of orders feeds a daily revenue report. One producer shipped a bug: from some point on it wrote
# MAGIC `amount` in cents instead of euros, and the report is wrong from there. The stream is append-only (readers were
# MAGIC given those messages, they never change), so the repair happens beside it:
# MAGIC
# MAGIC 1. run the **report** (a Spark batch job) on the stream as it is;
# MAGIC 2. **fork** the stream at the offset where the bad messages start: the fork shares every message before that
# MAGIC    offset with its source (no copy is made) and continues on its own after it;
# MAGIC 3. append the **corrected** messages to the fork, and re-run the same report on the fork;
# MAGIC 4. **compare** the two reports day by day, while the source and its readers are left exactly as they were.
# MAGIC
# MAGIC Forks (`Stream-Forked-From`, `Stream-Fork-Offset`) are part of the protocol; reads of a fork's inherited part
# MAGIC come from its source's history (Spark's direct history reads included).
# MAGIC
# MAGIC **Widgets**: `server_url`, `token`, `ca_cert_file` (see the quickstart notebook); `stream` and `fork` (the
# MAGIC notebook deletes and re-creates both, so each run starts from scratch); `good_orders` (written correctly) and
# MAGIC `bad_orders` (written in cents by the buggy producer).

# COMMAND ----------

# ruff: noqa: F821, E402  (spark, dbutils, display: Databricks globals; imports sit in the cells using them)
dbutils.widgets.text("server_url", "http://127.0.0.1:4437", "Server URL")
dbutils.widgets.text("token", "", "Bearer token (empty: none)")
dbutils.widgets.text("ca_cert_file", "", "CA file for https:// (empty: the system's CAs)")
dbutils.widgets.text("stream", "orders", "Source stream")
dbutils.widgets.text("fork", "orders-backfill", "Fork")
dbutils.widgets.text("good_orders", "600", "Orders written correctly")
dbutils.widgets.text("bad_orders", "150", "Orders written in cents")

server_url = dbutils.widgets.get("server_url").rstrip("/")
token = dbutils.widgets.get("token") or None  # better: dbutils.secrets.get("<scope>", "<key>")
ca_cert_file = dbutils.widgets.get("ca_cert_file") or None
connection = {"token": token, "caCertFile": ca_cert_file}  # the connector's connection options
connection = {name: value for name, value in connection.items() if value is not None}
good_orders = int(dbutils.widgets.get("good_orders"))
bad_orders = int(dbutils.widgets.get("bad_orders"))

# COMMAND ----------

import contextlib

from pyspark_durable_streams.client import Client, NotFound

client = Client(server_url, token=token, verify=ca_cert_file)
source = client.stream(f"v1/stream/{dbutils.widgets.get('stream')}")
fork = client.stream(f"v1/stream/{dbutils.widgets.get('fork')}")
for stale in (fork, source):  # a fork first: a source with forks is only soft-deleted
    with contextlib.suppress(NotFound):
        stale.delete()
source.create("application/json")


def order(i: int) -> dict[str, str | float]:
    """The i-th order, as it should have been written: deterministic, so the results can be checked."""
    return {"order_id": f"o-{i:05d}", "day": f"2026-11-{1 + i % 7:02d}", "amount": round(5 + (i * 37) % 200 / 4, 2)}


def in_cents(message: dict[str, str | float]) -> dict[str, str | float]:
    """What the buggy producer wrote: the amount in cents."""
    return {**message, "amount": round(float(message["amount"]) * 100, 2)}


source.append_json_batch([order(i) for i in range(good_orders)])
bad_from = source.metadata().next_offset  # where the buggy producer's messages begin
source.append_json_batch([in_cents(order(i)) for i in range(good_orders, good_orders + bad_orders)])
print(source.url, "holds", good_orders + bad_orders, "orders; the bad ones start at", bad_from)

# COMMAND ----------

# MAGIC %md
# MAGIC ## 1. The report, on the stream as it is
# MAGIC
# MAGIC One function, used unchanged on the source and on the fork: revenue and order count per day.

# COMMAND ----------

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def revenue_report(stream_url: str) -> DataFrame:
    return (
        spark.read.format("durable_streams")
        .schema("order_id string, day string, amount double")
        .option("url", stream_url)
        .options(**connection)
        .load()
        .groupBy("day")
        .agg(F.round(F.sum("amount"), 2).alias("revenue"), F.count("*").alias("orders"))
        .orderBy("day")
    )


production = revenue_report(source.url)
display(production)

# COMMAND ----------

# MAGIC %md
# MAGIC ## 2. Fork where the bad messages begin, and write the corrected ones
# MAGIC
# MAGIC The fork's offsets below `bad_from` are its source's: the same messages at the same offsets. After it, the
# MAGIC fork has its own. The producer's corrected output goes there (here: the same orders, in euros).

# COMMAND ----------

fork.create("application/json", forked_from=source, fork_offset=bad_from)
fork.append_json_batch([order(i) for i in range(good_orders, good_orders + bad_orders)])
inherited = [message.offset for message in fork.read("-1")][:good_orders]
shared = inherited == [message.offset for message in source.read("-1")][:good_orders]
print(fork.url, "forked at", bad_from, "; shares its first", good_orders, "messages' offsets:", shared)

# COMMAND ----------

# MAGIC %md
# MAGIC ## 3. Re-run the report on the fork, and compare

# COMMAND ----------

backfilled = revenue_report(fork.url)
comparison = (
    production.withColumnRenamed("revenue", "revenue_before")
    .drop("orders")
    .join(backfilled.withColumnRenamed("revenue", "revenue_after"), "day")
    .withColumn("difference", F.round(F.col("revenue_after") - F.col("revenue_before"), 2))
    .orderBy("day")
)
display(comparison)
report_before = {row["day"]: row["revenue"] for row in production.collect()}
report_after = {row["day"]: row["revenue"] for row in backfilled.collect()}
orders_after = sum(row["orders"] for row in backfilled.collect())

# COMMAND ----------

# MAGIC %md
# MAGIC ## 4. The source is untouched
# MAGIC
# MAGIC Its readers see what they were given: the same messages, the same offsets. Once the corrected report is
# MAGIC accepted, readers move to the fork (its offsets continue theirs below `bad_from`) or the fork is kept as the
# MAGIC audit trail of the repair.

# COMMAND ----------

source_count = spark.read.format("durable_streams").option("url", source.url).options(**connection).load().count()
print("source:", source_count, "messages; fork:", orders_after, "orders in its report")
client.close()
