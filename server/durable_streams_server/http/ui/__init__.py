"""The status page: ``/ui`` (static files, ``page``), the JSON it shows (``/v1/status/...``,
``status`` and ``streams_view``), the rates of its chart (``samples``), and a Grafana dashboard
over ``/metrics`` (``grafana/durable-streams.json``).

Nothing here runs on the request hot path: every figure is read from objects the server keeps
anyway (the engine, storage, the metrics registry) when the page asks, and only then.
"""
