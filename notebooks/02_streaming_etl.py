# Databricks notebook source
# MAGIC %md
# MAGIC # Streaming ETL: a durable stream into Delta, and into another durable stream
# MAGIC
# MAGIC `readStream` from a durable stream of orders, parse and enrich them, and write them with two queries:
# MAGIC
# MAGIC 1. every order into a **Delta table**;
# MAGIC 2. the large orders into **another durable stream**, through the exactly-once `durable_streams` sink.
# MAGIC
# MAGIC Both queries keep their position in a checkpoint: running the notebook again processes only what arrived since.
# MAGIC
# MAGIC **Delta.** Databricks runtimes have Delta built in, and the notebook writes with `format("delta")`. On a
# MAGIC cluster of your own, start the session with Delta before running the notebook:
# MAGIC `from pyspark_durable_streams.delta import delta_session; spark = delta_session("etl")` (needs the
# MAGIC `[delta]` extra, `pip install '.[spark,delta]'` in a checkout, and access to Maven Central for the jars). Where
# MAGIC the session has no Delta jars at all, the notebook falls back to writing through the `deltalake` Python package
# MAGIC (delta-rs) in `foreachBatch`, with the same exactly-once guarantee (see the cell that does it); that
# MAGIC package is not part of the `[spark]` extra: `pip install deltalake` (or the `[server]` extra) where you need it.
# MAGIC
# MAGIC **Widgets**: `server_url`, `token`, `ca_cert_file`;
# MAGIC `source_stream` and `target_stream` (names under `/v1/stream/`); `seed_orders`
# MAGIC (orders the notebook appends to the source first, so that it has something to read; `0` to read an existing
# MAGIC stream); `large_order_eur`; `delta_path` and `checkpoint_dir` (on Databricks, locations the cluster may
# MAGIC write, such as a Unity Catalog volume); `trigger`: `availableNow` processes what is there and stops; an interval
# MAGIC such as `10 seconds` keeps both queries running, one micro-batch per interval, until the last cell stops them.
# MAGIC `token` (the bearer token, when the server has `--auth-tokens-file`) and `ca_cert_file` (a CA file for an
# MAGIC `https://` server with a self-signed certificate; a path every node can read) connect to a remote server: see
# MAGIC the quickstart notebook for setting one up.

# COMMAND ----------

# ruff: noqa: F821, E402  (spark, dbutils, display: Databricks globals; imports sit in the cells using them)
dbutils.widgets.text("server_url", "http://127.0.0.1:4437", "Server URL")
dbutils.widgets.text("token", "", "Bearer token (empty: none)")
dbutils.widgets.text("ca_cert_file", "", "CA file for https:// (empty: the system's CAs)")
dbutils.widgets.text("source_stream", "etl-orders", "Source stream")
dbutils.widgets.text("target_stream", "etl-large-orders", "Target stream (large orders)")
dbutils.widgets.text("seed_orders", "500", "Orders to append to the source first")
dbutils.widgets.text("large_order_eur", "100", "Large order threshold (EUR)")
dbutils.widgets.text("delta_path", "/tmp/durable-streams-notebooks/etl/orders", "Delta table path")
dbutils.widgets.text("checkpoint_dir", "/tmp/durable-streams-notebooks/etl/checkpoints", "Checkpoint directory")
dbutils.widgets.text("trigger", "availableNow", "Trigger: availableNow, or an interval like 10 seconds")

server_url = dbutils.widgets.get("server_url").rstrip("/")
token = dbutils.widgets.get("token") or None  # better: dbutils.secrets.get("<scope>", "<key>")
ca_cert_file = dbutils.widgets.get("ca_cert_file") or None
connection = {"token": token, "caCertFile": ca_cert_file}  # the connector's connection options
connection = {name: value for name, value in connection.items() if value is not None}
source_url = f"{server_url}/v1/stream/{dbutils.widgets.get('source_stream')}"
target_url = f"{server_url}/v1/stream/{dbutils.widgets.get('target_stream')}"
seed_orders = int(dbutils.widgets.get("seed_orders"))
large_order_eur = float(dbutils.widgets.get("large_order_eur"))
delta_path = dbutils.widgets.get("delta_path")
checkpoint_dir = dbutils.widgets.get("checkpoint_dir").rstrip("/")
trigger = dbutils.widgets.get("trigger")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Orders to read
# MAGIC
# MAGIC A producer stands in for the application that writes the orders: an idempotent producer batches them into
# MAGIC few requests and retries safely.

# COMMAND ----------

import random
import uuid

from pyspark_durable_streams.client import Client, Producer

with Client(server_url, token=token, verify=ca_cert_file) as client:
    source = client.stream(source_url)
    source.create("application/json")
    rng = random.Random()
    with Producer(source, f"etl-seed-{uuid.uuid4()}", epoch=0) as producer:
        for _ in range(seed_orders):
            producer.send_json(
                {
                    "order_id": str(uuid.uuid4()),
                    "customer": f"customer-{rng.randrange(20)}",
                    "amount": round(rng.uniform(1, 250), 2),
                    "currency": rng.choice(["EUR", "USD", "GBP"]),
                }
            )
    print(f"appended {seed_orders} orders; the source's tail is now {source.metadata().next_offset}")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Read and transform
# MAGIC
# MAGIC The schema parses each JSON message into columns; `offset` and `timestamp` are the message's own. The
# MAGIC transformation is deterministic (no `current_timestamp()`, no `rand()`, no shuffle): that is what lets the
# MAGIC `durable_streams` sink re-send a re-run micro-batch byte for byte, which the server then deduplicates.

# COMMAND ----------

from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

orders = (
    spark.readStream.format("durable_streams")
    .schema("order_id string, customer string, amount double, currency string, offset string, timestamp timestamp")
    .option("url", source_url)
    .options(**connection)
    .option("maxMessagesPerTrigger", 10_000)
    .load()
)
eur_per_unit = F.when(F.col("currency") == "USD", 0.92).when(F.col("currency") == "GBP", 1.17).otherwise(1.0)
enriched = orders.select(
    "order_id",
    "customer",
    "amount",
    "currency",
    F.round(F.col("amount") * eur_per_unit, 2).alias("amount_eur"),
    F.col("offset").alias("source_offset"),
    F.col("timestamp").alias("ordered_at"),
)


def run(writer: DataStreamWriter, name: str) -> StreamingQuery:
    """Start a query under the chosen trigger; either way it has processed all there is when this returns."""
    writer = writer.option("checkpointLocation", f"{checkpoint_dir}/{name}")
    if trigger == "availableNow":
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination()
    else:
        query = writer.trigger(processingTime=trigger).start()
        query.processAllAvailable()  # it keeps running: the last cell stops it
    return query


# COMMAND ----------

# MAGIC %md
# MAGIC ## Every order into Delta
# MAGIC
# MAGIC `has_delta_jvm(spark)` asks the session whether it can resolve `format("delta")`. If it can (Databricks, or a
# MAGIC session from `delta_session()`), the query writes with Spark's Delta sink. **If it cannot, this cell writes
# MAGIC through `deltalake` (delta-rs) in `foreachBatch` instead:** each micro-batch is collected to the driver as
# MAGIC Arrow and appended in one Delta commit that records the query id and batch id as a Delta application
# MAGIC transaction (the mechanism behind Delta's own `txnAppId`/`txnVersion` options). A batch Spark runs again after
# MAGIC a failure finds its id recorded and is skipped, so the table holds every order exactly once either way.
# MAGIC The fallback needs the `deltalake` package; without it (and without Delta jars) the cell stops, saying so.

# COMMAND ----------

from pyspark.sql import DataFrame

from pyspark_durable_streams.delta import has_delta_jvm

use_spark_delta = has_delta_jvm(spark)
if not use_spark_delta:
    try:
        from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
        from deltalake.exceptions import TableNotFoundError
    except ImportError as missing:
        raise ImportError(
            "this session cannot write Delta: it has no Delta jars (format('delta')), and the fallback needs the "
            "deltalake package, which the [spark] extra does not install. Install it on the cluster (pip install "
            "deltalake), or start the session with Delta (pyspark_durable_streams.delta.delta_session)"
        ) from missing


def append_with_deltalake(batch: DataFrame, batch_id: int) -> None:
    app_id = batch.sparkSession.sparkContext.getLocalProperty("sql.streaming.queryId")
    try:
        done = DeltaTable(delta_path).transaction_version(app_id)
    except TableNotFoundError:
        done = None
    if done is not None and batch_id <= done:
        return  # this batch is in the table already
    commit = CommitProperties(app_transactions=[Transaction(app_id, batch_id)])
    write_deltalake(delta_path, batch.toArrow(), mode="append", commit_properties=commit)


if use_spark_delta:
    to_delta = run(enriched.writeStream.format("delta").option("path", delta_path), "orders_to_delta")
else:
    print("this session has no Delta jars: writing through deltalake in foreachBatch")
    to_delta = run(enriched.writeStream.foreachBatch(append_with_deltalake), "orders_to_delta")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Large orders into another durable stream
# MAGIC
# MAGIC The `durable_streams` sink appends each row as one JSON message. Every write task appends as an idempotent
# MAGIC producer (query id and partition; the batch id is the epoch), so retried tasks and batches re-run after a
# MAGIC restart are deduplicated by the server: each large order reaches the target exactly once.

# COMMAND ----------

large_orders = enriched.where(F.col("amount_eur") >= large_order_eur).select(
    "order_id", "customer", "amount_eur", "source_offset"
)
to_stream = run(
    large_orders.writeStream.format("durable_streams")
    .option("url", target_url)
    .options(**connection)
    .option("createStream", "true"),
    "large_orders_to_stream",
)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Results

# COMMAND ----------

if use_spark_delta:
    delta_orders = spark.read.format("delta").load(delta_path)
else:
    delta_orders = spark.createDataFrame(DeltaTable(delta_path).to_pyarrow_table())
delta_count = delta_orders.count()
large_count = spark.read.format("durable_streams").option("url", target_url).options(**connection).load().count()
print(f"{delta_count} orders in the Delta table, {large_count} large orders in {target_url}")
display(
    delta_orders.groupBy("currency")
    .agg(F.count("*").alias("orders"), F.round(F.sum("amount_eur"), 2).alias("total_eur"))
    .orderBy("currency")
)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Stop
# MAGIC
# MAGIC With a processing-time trigger both queries are still running; this stops them (with `availableNow` they have
# MAGIC stopped already).

# COMMAND ----------

for query in (to_delta, to_stream):
    query.stop()
