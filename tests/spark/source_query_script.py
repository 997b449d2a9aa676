"""A streaming query in its own process, for the SIGKILL test.

usage: source_query_script.py STREAM_URL OUT_DIR CHECKPOINT_DIR slow|available-now

``slow`` runs small rate-limited batches whose tasks sleep a little per row (a pass-through
UDF), so a kill lands mid-batch; ``available-now`` replays the interrupted batch from the
offset log, reads whatever is left in bigger batches, and exits.
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
    url, out, checkpoint, mode = sys.argv[1:5]
    pause_s = 0.004 if mode == "slow" else 0.0

    @udf(StringType())
    def slowly(offset: str) -> str:
        time.sleep(pause_s)  # only the "slow" run, so that the kill lands mid-batch
        return offset

    spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    pyspark_durable_streams.register(spark)
    df = (
        spark.readStream.format("durable_streams")
        .option("url", url)
        .option("maxMessagesPerTrigger", "400" if mode == "slow" else "2000")
        .option("messagesPerPartition", "200")
        .load()
    )
    if mode == "slow":
        df = df.withColumn("offset", slowly(col("offset")))
    writer = df.writeStream.format("parquet").option("path", out).option("checkpointLocation", checkpoint)
    if mode == "slow":
        query = writer.trigger(processingTime="0 seconds").start()
        print("STARTED", flush=True)
        query.awaitTermination()
    else:
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination()
        print("DONE", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
