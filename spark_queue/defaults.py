"""Every default and limit of the queue engine, documented once.

Settings, the client, the CLI, the Spark options and the jobs read their
defaults from here, so a change is made in one place.
"""

from __future__ import annotations

# -- queue settings (QueueSettings, create_queue, 'bdq queue create') ----------------------

#: Ids per bucket (one Cassandra partition).
BUCKET_SIZE = 1000
#: Seconds a received message stays invisible to other receivers.
VISIBILITY_TIMEOUT = 30.0
#: BlueDove's K: a receive picks among the oldest K visible messages per message asked for.
ORDER_HINT = 1
#: Largest order hint accepted.
MAX_ORDER_HINT = 1000
#: Seconds a message lives unacked before it expires (7 days).
MESSAGE_TTL = 7 * 86400
#: Largest payload accepted by default, in bytes (256 KiB).
MAX_MESSAGE_BYTES = 256 * 1024
#: Seconds a bucket stays open for delayed writes after its last id was handed out.
SEAL_DELAY = 5.0
#: Seconds a send repeats a write that failed transiently (a timeout, a dropped
#: connection) with the same ids and write timestamp before it raises (store/retries.py).
SEND_RETRY = 30.0
#: Lanes of a queue: units of order, each received by one consumer at a time (lanes.py).
LANES = 8

#: Largest bucket size accepted.
MAX_BUCKET_SIZE = 100_000
#: Longest message TTL accepted: Cassandra's limit, 20 years in seconds.
MAX_TTL = 630_720_000
#: Largest max_message_bytes a queue's settings may hold (16 MiB). A queue created or
#: changed now is also bounded by what one write of its cluster holds, 16 MiB less 64 KiB
#: with Cassandra's defaults (store/write_limits.py); a larger value stored earlier is read.
MAX_MESSAGE_BYTES_LIMIT = 16 * 1024 * 1024
#: Most lanes a queue may have (all of their owners sit in one partition).
MAX_LANES = 1024

# -- engine limits --------------------------------------------------------------------------

#: Most messages one receive, peek or batch send may handle.
MAX_BATCH = 10_000
#: Seconds a receipt's lease must still run (its message's ``visible_at`` ahead of
#: now, read just before) for an ack to be a plain write instead of a Paxos round
#: (``store/acks.py``, with ``Queue.plain_acks``). Nobody leases a message
#: before its ``visible_at``, so inside this margin the lease cannot change under the
#: write; it covers consumers' clocks disagreeing (about a second; NTP keeps them
#: within milliseconds) and the write's own time in flight (another second). A
#: receipt closer to its deadline is acked conditionally.
ACK_PLAIN_MARGIN = 2.0
#: Seconds a lightweight transaction on a message (``change_visibility``, a dead-letter
#: take, a losing Spark attempt's release) is redone while a plain write stamped by a
#: clock ahead of Cassandra's shadows it (``store/lease_changes.py``): about the skew
#: between a host's clock and the node's it outlasts.
LWT_SHADOW_PATIENCE = 5.0
#: Seconds between two maintenance passes (seal, drop) of one queue handle.
MAINTENANCE_INTERVAL = 1.0
#: Seconds a bucket found without visible messages is skipped by this handle.
IDLE_RECHECK = 1.0
#: Seconds between two reads of the id sequence when receives come up short.
TAIL_REFRESH = 0.05
#: Most buckets dropped by one maintenance pass.
DROP_PER_PASS = 64
#: Most buckets one count (``stats()``) scans when a queue has more live buckets than this.
COUNT_BUDGET = 16
#: Seconds a handle uses a queue's settings before reading them again (``update_queue``).
SETTINGS_REFRESH = 2.0
#: Seconds a consumer owns a lane unless it renews (it renews at a third of it), at
#: most: a queue with a visibility timeout under 11 s shortens it (``lanes.lane_period``).
LANE_PERIOD = 10.0
#: The shortest lane period, whatever the visibility timeout: renewals at most one a second.
LANE_PERIOD_MIN = 3.0
#: Seconds a consumer with nothing to receive waits before looking for free lanes again;
#: doubled after each fruitless look up to ``LANE_LOOK_PAUSE_MAX``.
LANE_LOOK_PAUSE = 0.2
#: Free lanes one look tries to take, oldest first, when others take them first.
LANE_TRIES = 3
#: Longest pause between two looks for free lanes (a consumer with nothing to do).
LANE_LOOK_PAUSE_MAX = 2.0
#: Head buckets a look for free lanes reads (lane and visibility columns only).
LANE_LOOK_BUCKETS = 4

# The producer (``Queue.producer()``, ``send_async``): see ``spark_queue.producer``.
#: Seconds the producer waits after its oldest buffered message for a full batch.
DEFAULT_LINGER = 0.005
#: Most messages the producer writes as one batch (split per bucket).
DEFAULT_BATCH_SIZE = 500
#: Bucket batches in flight at once.
DEFAULT_MAX_REQUESTS = 8
#: Payload and header bytes accepted and not yet durable.
DEFAULT_MAX_BYTES_IN_FLIGHT = 64 * 1024 * 1024
#: Seconds ``send`` may block on a full producer before it raises.
DEFAULT_MAX_BLOCK = 60.0
#: Seconds the producer's background thread idles before it exits (a send starts it again).
IDLE_EXIT = 1.0

#: ElasticMQ (``org.elasticmq:elasticmq-server_2.13``) that ``bdq bench sqs`` compares with.
ELASTICMQ_VERSION = "1.6.14"
