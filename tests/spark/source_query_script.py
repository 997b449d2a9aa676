"""A streaming query in its own process, for the SIGKILL test.

usage: source_query_script.py STREAM_URL OUT_DIR CHECKPOINT_DIR

It runs small rate-limited batches whose tasks sleep a little per row (a pass-through UDF), so
that a kill lands mid-batch, until it is killed. The test restarts the query from the same
checkpoint in its own session.
"""

from __future__ import annotations

import os
import sys
import time

os.environ["PYSPARK_PYTHON"] = sys.executable

from pyspark.sql import SparkSession
from pyspark.sql.functions import col, udf
from pyspark.sql.types import StringType

import pyspark_durable_streams


def main() -> None:
    url, out, checkpoint = sys.argv[1:4]

    @udf(StringType())
    def slowly(offset: str) -> str:
        time.sleep(0.004)  # so that the kill lands mid-batch
        return offset

    spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    pyspark_durable_streams.register(spark)
    df = (
        spark.readStream.format("durable_streams")
        .option("url", url)
        .option("maxMessagesPerTrigger", "400")
        .option("messagesPerPartition", "200")
        .load()
    )
    df = df.withColumn("offset", slowly(col("offset")))
    writer = df.writeStream.format("parquet").option("path", out).option("checkpointLocation", checkpoint)
    query = writer.trigger(processingTime="0 seconds").start()
    print("STARTED", flush=True)
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
