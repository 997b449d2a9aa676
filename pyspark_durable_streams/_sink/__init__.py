"""The sink's room: how ``sink.py``'s writers append exactly once.

``producer_identity`` derives each task's (Producer-Id, Epoch) from what Spark persists,
``encoding`` cuts a task's rows into request bodies (a pure function of the rows), and
``sender`` numbers and delivers them with their retries, through the connector's one client
(``_connect``).
"""
