"""Python client for the Durable Streams protocol (sync, ``requests`` + ``sseclient-py``).

from pyspark_durable_streams.client import Client

with Client("http://127.0.0.1:4437", token="...") as client:
    stream = client.stream("v1/stream/orders")
    stream.create("application/json")
    stream.append_json({"id": 1})
    for message in stream.read("-1"):
        print(message.offset, message.json())
"""

from ._client import Client
from ._http import DEFAULT_TIMEOUT, Backoff, Timeout
from .appends import encode_json_batch
from .bootstrap import Bootstrap
from .buckets import Bucket, BucketInfo, StreamInfo
from .consumers import ConsumerLag, Consumers, Tombstone
from .delivery import ProducerRequest
from .errors import (
    BadRequest,
    CertificateError,
    Conflict,
    ConnectError,
    DurableStreamsError,
    Forbidden,
    Gone,
    HTTPStatusError,
    NotFound,
    PayloadTooLarge,
    PreconditionFailed,
    ProducerClosed,
    ProducerFenced,
    RateLimited,
    ResponseError,
    SequenceGap,
    ServerError,
    StreamClosed,
    TimeoutError,
    TransportError,
    Unauthorized,
)
from .files import RemoteFile
from .models import NO_LIMIT, AppendResult, CreateResult, Message, Retention, Snapshot, StreamMetadata
from .producer import Producer, ProducerStats
from .read_framing import ReadFraming
from .read_plans import PlannedFile, PlannedRowGroup, PlanSegment, PlansUnavailable, ReadPlan
from .reading import StreamReader
from .retention import RetentionPolicy
from .snapshots import Snapshots
from .stream import Stream
from .subscriptions import PullWakeWorker, Subscriptions, Wake, verify_webhook_signature
from .time_lookup import TimeLookup, TimeLookupUnavailable

__all__ = [
    "DEFAULT_TIMEOUT",
    "NO_LIMIT",
    "AppendResult",
    "Backoff",
    "BadRequest",
    "Bootstrap",
    "Bucket",
    "BucketInfo",
    "CertificateError",
    "Client",
    "Conflict",
    "ConnectError",
    "ConsumerLag",
    "Consumers",
    "CreateResult",
    "DurableStreamsError",
    "Forbidden",
    "Gone",
    "HTTPStatusError",
    "Message",
    "NotFound",
    "PayloadTooLarge",
    "PlanSegment",
    "PlannedFile",
    "PlannedRowGroup",
    "PlansUnavailable",
    "PreconditionFailed",
    "Producer",
    "ProducerClosed",
    "ProducerFenced",
    "ProducerRequest",
    "ProducerStats",
    "PullWakeWorker",
    "RateLimited",
    "ReadFraming",
    "ReadPlan",
    "RemoteFile",
    "ResponseError",
    "Retention",
    "RetentionPolicy",
    "SequenceGap",
    "ServerError",
    "Snapshot",
    "Snapshots",
    "Stream",
    "StreamClosed",
    "StreamInfo",
    "StreamMetadata",
    "StreamReader",
    "Subscriptions",
    "TimeLookup",
    "TimeLookupUnavailable",
    "Timeout",
    "TimeoutError",
    "Tombstone",
    "TransportError",
    "Unauthorized",
    "Wake",
    "encode_json_batch",
    "verify_webhook_signature",
]
