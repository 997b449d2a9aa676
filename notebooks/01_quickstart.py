# Databricks notebook source
# MAGIC %md
# MAGIC # Quickstart: Spark and a Durable Streams server
# MAGIC
# MAGIC Point the notebook at a server, create a stream, write to it with a Spark batch job, and read it back.
# MAGIC
# MAGIC **Before you run it**
# MAGIC
# MAGIC * A server the cluster can reach: `make serve` in a checkout of pyspark-durable-streams, or
# MAGIC   `durable-streams-server --host 0.0.0.0 --port 4437 --data-dir /var/lib/durable-streams`.
# MAGIC * The package on the cluster, as a cluster library: the wheel built by `pip wheel --no-deps .` in a checkout
# MAGIC   (its `[spark]` extra lists what the connector needs; Databricks runtimes already have PySpark and pyarrow).
# MAGIC   The notebooks contain no `%pip` cells: the project's tests execute every cell of every notebook.
# MAGIC * Set the widgets at the top: `server_url` (the server's base URL), `stream` (a stream name), `rows`.

# COMMAND ----------

# ruff: noqa: F821, E402  (spark, dbutils, display: Databricks globals; imports sit in the cells using them)
dbutils.widgets.text("server_url", "http://127.0.0.1:4437", "Server URL")
dbutils.widgets.text("stream", "quickstart-orders", "Stream name")
dbutils.widgets.text("rows", "1000", "Rows to write")

server_url = dbutils.widgets.get("server_url").rstrip("/")
stream_url = f"{server_url}/v1/stream/{dbutils.widgets.get('stream')}"
rows = int(dbutils.widgets.get("rows"))
print(stream_url)

# COMMAND ----------

# MAGIC %md
# MAGIC ## 1. Create the stream
# MAGIC
# MAGIC A JSON stream keeps message boundaries: every Spark row becomes one message. Creating is idempotent
# MAGIC (`PUT`): running the cell again with the same content type changes nothing.

# COMMAND ----------

from pyspark_durable_streams.client import Client

with Client(server_url) as client:
    created = client.stream(stream_url).create("application/json")
print("created" if created.created else "exists already", "- next offset", created.next_offset)

# COMMAND ----------

# MAGIC %md
# MAGIC ## 2. Write with a Spark batch job
# MAGIC
# MAGIC Rows without a `value` column become one JSON object each. With `producerId`, every write task appends as an
# MAGIC idempotent producer named after the job and its partition, so running this cell again stores nothing twice:
# MAGIC the server recognises the repeated appends (same producer, epoch and sequence numbers) and answers `204`.
# MAGIC Without `producerId` a second run appends the rows again.

# COMMAND ----------

orders = spark.range(rows).selectExpr(
    "id AS order_id",
    "concat('customer-', id % 7) AS customer",
    "CAST((id % 100) * 1.25 AS DOUBLE) AS amount",
)
(
    orders.write.format("durable_streams")
    .option("url", stream_url)
    .option("producerId", "quickstart-orders-load")
    .mode("append")
    .save()
)

# COMMAND ----------

# MAGIC %md
# MAGIC ## 3. Read it back
# MAGIC
# MAGIC One row per message: `stream`, `offset` (the message's own offset), `value` (the JSON text of a JSON stream),
# MAGIC `content_type` and `timestamp` (when the server stored it).

# COMMAND ----------

messages = spark.read.format("durable_streams").option("url", stream_url).load()
message_count = messages.count()
print(message_count, "messages")
display(messages.orderBy("offset").limit(5))

# COMMAND ----------

# MAGIC %md
# MAGIC A schema turns the JSON messages into columns (fields that are missing or of another type are null);
# MAGIC the columns `stream`, `offset`, `value`, `content_type` and `timestamp` in a schema are the message's own.

# COMMAND ----------

from pyspark.sql import functions as F

parsed = (
    spark.read.format("durable_streams")
    .schema("order_id long, customer string, amount double, offset string")
    .option("url", stream_url)
    .load()
)
per_customer = (
    parsed.groupBy("customer")
    .agg(F.count("*").alias("orders"), F.round(F.sum("amount"), 2).alias("total"))
    .orderBy("customer")
)
display(per_customer)
