"""The source's room: how ``source.py``'s readers plan and read.

On the driver: ``offsets`` (protocol offsets as Spark offsets, splitting and counting
ranges), ``range_offsets`` (each stream's start or end under the read's start and end kinds),
``incarnations`` and ``stream_changes`` (streams deleted or re-created between batches),
``admission`` (what a read limit admits, what pacing holds back),
``driver_streams`` (tails, capabilities, planning a batch into partitions) and
``direct_plans`` (read plans cut into partitions). On executors: ``task_reader`` (a range
over HTTP), ``direct_reads`` (a range from the Delta table's Parquet files, which
``direct_files`` opens) and ``rows`` (messages into Arrow rows of the declared schema).
Every request goes through the connector's one client (``_connect``).
"""
