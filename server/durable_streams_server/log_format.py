"""The server's log lines: logfmt (default) or JSON, one event per line, with each event's
structured ``extra`` fields as keys (``--log-format``)."""

from __future__ import annotations

import json
import logging
import sys

# Fields every LogRecord has; the rest are the structured ``extra`` of one event.
# (uvicorn adds a ``color_message`` duplicate of the message: dropped.)
_STANDARD_RECORD_FIELDS = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "color_message",
}


class LogfmtFormatter(logging.Formatter):
    """``ts=… level=… logger=… msg=… key=value``: greppable, one event per line; the time to the
    millisecond (a failover's steps are a few hundred ms apart)."""

    def format(self, record: logging.LogRecord) -> str:
        fields = {
            "ts": f"{self.formatTime(record, '%Y-%m-%dT%H:%M:%S')}.{int(record.msecs):03d}",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields.update({k: v for k, v in vars(record).items() if k not in _STANDARD_RECORD_FIELDS})
        line = " ".join(f"{key}={_logfmt_value(value)}" for key, value in fields.items())
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = {
            "ts": self.formatTime(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields.update({k: v for k, v in vars(record).items() if k not in _STANDARD_RECORD_FIELDS})
        if record.exc_info:
            fields["exc"] = self.formatException(record.exc_info)
        return json.dumps(fields, default=str)


def _logfmt_value(value: object) -> str:
    text = str(value)
    return json.dumps(text) if (" " in text or "=" in text or not text) else text


def configure_logging(level: str, fmt: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else LogfmtFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # httpx logs every request at info: the cluster's lease, interest and report requests (one
    # every few seconds per shard) and webhook deliveries. Quiet by default; shown with debug.
    logging.getLogger("httpx").setLevel(root.level if root.level <= logging.DEBUG else max(logging.WARNING, root.level))
