"""The ``durable_streams`` Spark data source: one class Spark finds by name.

Reading lives in ``source.py`` (batch and micro-batch readers), writing in ``sink.py``
(batch and streaming writers), option parsing and validation in ``options.py``. This class
only wires them to Spark's Python Data Source API.
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from .options import parse_read_options, parse_write_options
from .sink import DurableStreamsStreamWriter, DurableStreamsWriter
from .source import DurableStreamsPushdownReader, DurableStreamsReader, DurableStreamsStreamReader, infer_schema


class DurableStreamsDataSource(DataSource):
    """``spark.read[Stream].format("durable_streams")`` and ``df.write[Stream].format(...)``."""

    @classmethod
    def name(cls) -> str:
        return "durable_streams"

    def schema(self) -> StructType:
        # Called at load(): this is where a bad or unknown read option fails.
        return infer_schema(parse_read_options(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        options = parse_read_options(self.options)
        if options.filter_pushdown:
            return DurableStreamsPushdownReader(options, schema)
        return DurableStreamsReader(options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return DurableStreamsStreamReader(parse_read_options(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return DurableStreamsWriter(parse_write_options(self.options), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return DurableStreamsStreamWriter(parse_write_options(self.options), schema, overwrite)
