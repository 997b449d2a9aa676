# Databricks notebook source
# MAGIC %md
# MAGIC # Quickstart: Spark and a Durable Streams server
# MAGIC
# MAGIC Point the notebook at a server, create a stream, write to it with a Spark batch job, and read it back.
# MAGIC
# MAGIC **Before you run it**
# MAGIC
# MAGIC * A server the cluster can reach (see below). The widgets' default, `http://127.0.0.1:4437`, is a server on the
# MAGIC   driver itself, e.g. `make serve` on your own machine with a local Spark.
# MAGIC * The package on the cluster, as a cluster library: the wheel built by `pip wheel --no-deps .` in a checkout
# MAGIC   (its `[spark]` extra lists what the connector needs; Databricks runtimes already have PySpark and pyarrow).
# MAGIC   The notebooks contain no `%pip` cells: the project's tests execute every cell of every notebook.
# MAGIC * Set the widgets at the top: `server_url` (the server's base URL), `token` and `ca_cert_file` (empty for a
# MAGIC   server on loopback), `stream` (a stream name), `rows`.
# MAGIC
# MAGIC **A server elsewhere (Databricks).** The driver and the executors connect to the server, so it runs on a host
# MAGIC they can reach (a VM in the workspace's network). On any address but loopback the server requires bearer
# MAGIC tokens (or `--allow-unauthenticated`, for a network you trust), and tokens travel in clear text without TLS:
# MAGIC
# MAGIC ```bash
# MAGIC echo '[{"name": "databricks", "token": "<a long random secret>", "scope": "write"}]' > tokens.json
# MAGIC durable-streams-server --host 0.0.0.0 --port 4437 --data-dir /var/lib/durable-streams \
# MAGIC   --auth-tokens-file tokens.json --tls-certfile cert.pem --tls-keyfile key.pem
# MAGIC ```
# MAGIC
# MAGIC Then set `server_url` to `https://<host>:4437` and `token` to the token (better: keep it in a Databricks secret
# MAGIC scope and replace the widget by `dbutils.secrets.get(...)`, which also keeps it out of the notebook's state). A
# MAGIC certificate from a CA the cluster trusts needs nothing more; for a self-signed one, put `cert.pem` where every
# MAGIC node can read it (a Unity Catalog volume, `/Volumes/...`) and set `ca_cert_file` to that path. The notebook
# MAGIC passes both to the Python client (`Client(..., token=..., verify=...)`) and to Spark (options `token` and
# MAGIC `caCertFile`; Spark redacts `token` in its UI and logs).

# COMMAND ----------

# ruff: noqa: F821, E402  (spark, dbutils, display: Databricks globals; imports sit in the cells using them)
dbutils.widgets.text("server_url", "http://127.0.0.1:4437", "Server URL")
dbutils.widgets.text("token", "", "Bearer token (empty: none)")
dbutils.widgets.text("ca_cert_file", "", "CA file for https:// (empty: the system's CAs)")
dbutils.widgets.text("stream", "quickstart-orders", "Stream name")
dbutils.widgets.text("rows", "1000", "Rows to write")

server_url = dbutils.widgets.get("server_url").rstrip("/")
token = dbutils.widgets.get("token") or None  # better: dbutils.secrets.get("<scope>", "<key>")
ca_cert_file = dbutils.widgets.get("ca_cert_file") or None
connection = {"token": token, "caCertFile": ca_cert_file}  # the connector's connection options
connection = {name: value for name, value in connection.items() if value is not None}
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

with Client(server_url, token=token, verify=ca_cert_file) as client:
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
    .options(**connection)
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

messages = spark.read.format("durable_streams").option("url", stream_url).options(**connection).load()
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
    .options(**connection)
    .load()
)
per_customer = (
    parsed.groupBy("customer")
    .agg(F.count("*").alias("orders"), F.round(F.sum("amount"), 2).alias("total"))
    .orderBy("customer")
)
display(per_customer)
