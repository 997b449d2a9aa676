"""Reads and writes of ``durable_streams`` leave their Python workers' collector alone by
default, and freeze the workers' imports (so that the collection PySpark's daemon runs after
every task skips them, ``_worker_gc``) only with option ``freezeWorkerGc=true``.

Each test runs in a Python worker pool of its own (Spark keys pools by the registered source's
environment), so what another test's tasks did to the shared workers cannot make it pass: a
probe source in the same pool reports ``gc.get_freeze_count()`` of the workers, 0 before our
task ran there.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from pyspark import cloudpickle
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from servers import ServerProcess, session
from worker_pools import POOL_VARIABLE, register_in_pool

import pyspark_durable_streams
from pyspark_durable_streams.datasource import DurableStreamsDataSource

PROBES = 6

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import tests


class _ProbeReader(DataSourceReader):
    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(i) for i in range(PROBES)]

    def read(self, partition: InputPartition) -> Iterator[tuple[int, int, str]]:
        time.sleep(0.2)  # two tasks at a time hold two workers: the probes go round the idle ones
        yield os.getpid(), gc.get_freeze_count(), os.environ.get(POOL_VARIABLE, "")


class WorkerProbe(DataSource):
    @classmethod
    def name(cls) -> str:
        return "worker_gc_probe"

    def schema(self) -> str:
        return "pid int, frozen long, pool string"

    def reader(self, schema: object) -> DataSourceReader:
        return _ProbeReader()


@contextmanager
def own_workers(spark: SparkSession, pool: str) -> Iterator[Callable[[], dict[int, int]]]:
    """Our source and the probe registered with a worker pool of their own; yields the probe
    (frozen objects by worker process id). Afterwards our source is registered as before."""
    register_in_pool(spark, pool, DurableStreamsDataSource, WorkerProbe)

    def probe() -> dict[int, int]:
        rows = spark.read.format("worker_gc_probe").load().collect()
        assert {row.pool for row in rows} == {pool}
        return {row.pid: row.frozen for row in rows}

    try:
        yield probe
    finally:
        pyspark_durable_streams.register(spark)


def test_a_read_freezes_its_workers_only_when_asked(spark: SparkSession, server: ServerProcess) -> None:
    url = server.stream_url("gc-read")
    with session() as http:
        assert http.put(url, headers={"Content-Type": "text/plain"}).status_code == 201
        for i in range(4):
            assert http.post(url, headers={"Content-Type": "text/plain"}, data=f"m{i}").status_code == 204

    def read(**options: str) -> None:
        frame = spark.read.format("durable_streams").options(url=url, minPartitions="2", **options).load()
        assert sorted(row.value for row in frame.collect()) == ["m0", "m1", "m2", "m3"]

    with own_workers(spark, "gc-read") as probe:
        assert set(probe().values()) == {0}  # a fresh pool: nothing frozen
        read()
        read(freezeWorkerGc="false")
        assert set(probe().values()) == {0}  # the default: the workers' collector left alone
        read(freezeWorkerGc="true")
        assert max(probe().values()) > 10_000  # the worker's imports, at least (so the pool is ours)


def test_a_write_freezes_its_workers_only_when_asked(spark: SparkSession, server: ServerProcess) -> None:
    url = server.stream_url("gc-write")

    def write(first: int, **options: str) -> None:
        frame = spark.createDataFrame([(f"m{i}",) for i in range(first, first + 4)], "value string").repartition(2)
        frame.write.format("durable_streams").options(
            url=url, createStream="true", contentType="text/plain", **options
        ).mode("append").save()

    with own_workers(spark, "gc-write") as probe:
        assert set(probe().values()) == {0}
        write(0)
        assert set(probe().values()) == {0}
        write(4, freezeWorkerGc="true")
        assert max(probe().values()) > 10_000
    with session() as http:
        body = http.get(url, params={"offset": "-1"}).text
    assert sorted(body) == sorted("".join(f"m{i}" for i in range(8)))
