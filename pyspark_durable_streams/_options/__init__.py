"""The option tables of the ``durable_streams`` format, one module per concern.

``common`` (the ``Option`` spec, parsers, connection and target options), ``read`` (the
source's) and ``write`` (the sink's); ``pyspark_durable_streams.options`` is their public face.
"""
