"""spark-queue: a durable message queue stored in Apache Cassandra, with a Spark connector.

The public API is exactly ``__all__`` (a test guards it)::

    from spark_queue import QueueClient
    # Once, on purpose: a client never creates its keyspace (1 replica: a local node;
    # a cluster takes replicas per data center, {"dc1": 3, "dc2": 3})
    QueueClient.create_keyspace(1, hosts=["127.0.0.1:9042"], keyspace="bdq", exist_ok=True)
    with QueueClient(hosts=["127.0.0.1:9042"], keyspace="bdq") as client:
        orders = client.create_queue("orders", exist_ok=True)
        orders.send(b'{"sku": 1}')
        for delivery in orders.receive(max_messages=10):
            ...
            orders.ack(delivery.receipt)
"""

from __future__ import annotations

from spark_queue.client import QueueClient
from spark_queue.config import ConnectionSettings, QueueSettings
from spark_queue.errors import (
    BackendUnavailable,
    InvalidMessage,
    InvalidSetting,
    KeyspaceExists,
    KeyspaceNotFound,
    LocalNodeError,
    MessageTooLarge,
    MissingExtra,
    PermissionDenied,
    QueueExists,
    QueueNotFound,
    SparkQueueError,
    StaleReceipt,
)
from spark_queue.message import Delivery, Message, QueueStats
from spark_queue.producer import Producer
from spark_queue.queue import Queue

#: The one place the version is written: pyproject.toml reads it (a dynamic version),
#: and ``bdq --version`` prints it, installed or run from a checkout.
__version__ = "0.1.0"

__all__ = [
    "BackendUnavailable",
    "ConnectionSettings",
    "Delivery",
    "InvalidMessage",
    "InvalidSetting",
    "KeyspaceExists",
    "KeyspaceNotFound",
    "LocalNodeError",
    "Message",
    "MessageTooLarge",
    "MissingExtra",
    "PermissionDenied",
    "Producer",
    "Queue",
    "QueueClient",
    "QueueExists",
    "QueueNotFound",
    "QueueSettings",
    "QueueStats",
    "SparkQueueError",
    "StaleReceipt",
    "__version__",
]
