"""The load generator of ``bdq bench sqs``: SigV4-signed AWS JSON 1.0 requests over aiohttp.

One event loop drives ``connections`` concurrent clients over a pooled aiohttp
session, so the generator is not the bottleneck: signing (botocore's ``SigV4Auth``)
and JSON cost tens of microseconds a request, and batches of 10 carry ten messages
per request. A run on one target is three phases on a fresh queue:

1. send: ``messages`` numbered bodies with SendMessageBatch, spread over the endpoints;
2. receive+delete: ReceiveMessage (10, 1 s long poll) then DeleteMessageBatch, until
   every distinct body came back or nothing came for ``idle_seconds``;
3. wake-ups: a receive long-polls an empty queue, a message is sent meanwhile, and the
   time from the send's start to the receive's answer is one sample.

Several endpoints (two ``bdq serve`` processes) are used round robin, as behind a
load balancer.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from spark_queue.bench.cpu_meter import CpuMeter
from spark_queue.bench.sqs_results import TargetResult
from spark_queue.errors import SparkQueueError

try:
    import aiohttp
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials
except ImportError as e:
    from spark_queue.errors import MissingExtra

    raise MissingExtra("bdq bench sqs", "bench", e.name) from e

BATCH = 10
CONTENT_TYPE = "application/x-amz-json-1.0"


class LoadError(SparkQueueError):
    """A request of the benchmark was refused: the run's figures would mean nothing."""


@dataclass(frozen=True)
class Target:
    """Where to send: one or more endpoints of one service, and a key that signs for it.

    Attributes:
        name: The row's name in the results.
        urls: Endpoints (``http://127.0.0.1:9324``), used round robin.
        access_key_id: The key's id (any for ElasticMQ, which checks no signature).
        secret_access_key: The key's secret.
        region: The region signed for.
    """

    name: str
    urls: tuple[str, ...]
    access_key_id: str
    secret_access_key: str = field(repr=False)
    region: str = "us-east-1"


@dataclass(frozen=True, slots=True)
class Load:
    """How hard to push one target.

    Attributes:
        messages: Messages sent, then received and deleted.
        connections: Concurrent requests (and pooled connections).
        wake_rounds: Long-poll wake-up samples.
        idle_seconds: The receive phase ends after this long without a new message.
    """

    messages: int = 20_000
    connections: int = 32
    wake_rounds: int = 20
    idle_seconds: float = 10.0

    def __post_init__(self) -> None:
        for name in ("messages", "connections", "wake_rounds"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} = {getattr(self, name)!r}: must be 1 or more")


class SqsCaller:
    """Signs and sends SQS JSON requests to a target's endpoints, round robin."""

    def __init__(self, target: Target, session: aiohttp.ClientSession) -> None:
        self.target = target
        self.session = session
        self._credentials = Credentials(target.access_key_id, target.secret_access_key)
        self._turn = itertools.cycle(target.urls)

    async def call(self, action: str, params: dict[str, Any], url: str | None = None) -> Any:
        """One request; its JSON answer, or ``LoadError`` naming the action and the answer."""
        endpoint = url or next(self._turn)
        body = json.dumps(params).encode()
        request = AWSRequest(
            method="POST",
            url=endpoint + "/",
            data=body,
            headers={"X-Amz-Target": f"AmazonSQS.{action}", "Content-Type": CONTENT_TYPE},
        )
        SigV4Auth(self._credentials, "sqs", self.target.region).add_auth(request)
        async with self.session.post(
            endpoint + "/", data=body, headers=dict(request.headers.items())
        ) as answer:
            text = await answer.read()
        if answer.status != 200:
            raise LoadError(f"{action} on {endpoint}: HTTP {answer.status}: {text[:300]!r}")
        return json.loads(text) if text else {}


async def run_target(target: Target, load: Load) -> TargetResult:
    """The three phases on a fresh queue of ``target``, which is deleted after."""
    connector = aiohttp.TCPConnector(limit=load.connections + 2, force_close=False)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        caller = SqsCaller(target, session)
        name = f"bench-{uuid.uuid4().hex[:12]}"
        queue_url = (await caller.call("CreateQueue", {"QueueName": name}))["QueueUrl"]
        try:
            # The generator's own CPU over the two timed phases: evidence that it was
            # not the bottleneck (well under one core), or that it was.
            meter = CpuMeter(cassandra_pid=None)
            meter.start()
            send_seconds = await _send_phase(caller, queue_url, load)
            bodies, receive_seconds = await _receive_phase(caller, queue_url, load)
            meter.stop()
            wake_ms = await _wake_phase(caller, queue_url, load)
        finally:
            await caller.call("DeleteQueue", {"QueueUrl": queue_url})
    return TargetResult(
        name=target.name,
        processes=len(target.urls),
        sent=load.messages,
        send_seconds=send_seconds,
        received=sum(bodies.values()),
        distinct=len(bodies),
        receive_seconds=receive_seconds,
        wake_ms=tuple(wake_ms),
        generator_cpu=meter.use.client if meter.use else 0.0,
    )


def batches(messages: int) -> list[range]:
    """The numbered bodies of the send phase, in batches of at most 10."""
    return [range(i, min(i + BATCH, messages)) for i in range(0, messages, BATCH)]


async def _send_phase(caller: SqsCaller, queue_url: str, load: Load) -> float:
    todo = iter(batches(load.messages))

    async def sender() -> None:
        for batch in todo:  # one shared iterator: each batch goes to one sender
            entries = [{"Id": str(i), "MessageBody": f"m{i}"} for i in batch]
            answer = await caller.call(
                "SendMessageBatch", {"QueueUrl": queue_url, "Entries": entries}
            )
            if answer.get("Failed"):
                raise LoadError(f"SendMessageBatch refused entries: {answer['Failed'][:3]}")

    started = time.perf_counter()
    await asyncio.gather(*(sender() for _ in range(load.connections)))
    return time.perf_counter() - started


async def _receive_phase(
    caller: SqsCaller, queue_url: str, load: Load
) -> tuple[Counter[str], float]:
    bodies: Counter[str] = Counter()
    started = time.perf_counter()
    last_new = [started]

    async def receiver() -> None:
        while len(bodies) < load.messages:
            if time.perf_counter() - last_new[0] > load.idle_seconds:
                return
            answer = await caller.call(
                "ReceiveMessage",
                {"QueueUrl": queue_url, "MaxNumberOfMessages": BATCH, "WaitTimeSeconds": 1},
            )
            messages = answer.get("Messages", [])
            if not messages:
                continue
            for m in messages:
                if m["Body"] not in bodies:
                    last_new[0] = time.perf_counter()
                bodies[m["Body"]] += 1
            entries = [
                {"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]} for n, m in enumerate(messages)
            ]
            await caller.call("DeleteMessageBatch", {"QueueUrl": queue_url, "Entries": entries})

    await asyncio.gather(*(receiver() for _ in range(load.connections)))
    end = last_new[0] if len(bodies) < load.messages else time.perf_counter()
    return bodies, end - started


async def _wake_phase(caller: SqsCaller, queue_url: str, load: Load) -> list[float]:
    samples: list[float] = []
    urls: Sequence[str] = caller.target.urls
    for n in range(load.wake_rounds):
        # The receive and the send go to different servers when there are two.
        receive_url, send_url = urls[n % len(urls)], urls[(n + 1) % len(urls)]
        waiting = asyncio.create_task(
            caller.call(
                "ReceiveMessage",
                {"QueueUrl": queue_url, "WaitTimeSeconds": 20, "MaxNumberOfMessages": 1},
                url=receive_url,
            )
        )
        await asyncio.sleep(0.5)  # let the receive reach the server and start waiting
        # From the send's start: a fast server may wake the receive before the send's
        # answer is back, so the send's own round trip is part of every sample.
        sending = time.perf_counter()
        await caller.call("SendMessage", {"QueueUrl": queue_url, "MessageBody": f"w{n}"}, send_url)
        answer = await waiting
        samples.append((time.perf_counter() - sending) * 1000)
        for m in answer.get("Messages", []):
            await caller.call(
                "DeleteMessage", {"QueueUrl": queue_url, "ReceiptHandle": m["ReceiptHandle"]}
            )
    return samples
