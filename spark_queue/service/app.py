"""The ASGI application of ``bdq serve``: ``POST /``, speaking AWS JSON 1.0, and ``GET /metrics``.

Each request is, in order: read (at most ``MAX_BODY`` bytes), authenticated
(SigV4 against the key's stored secret, ``sigv4.py`` and ``accounts.py``), decoded
(``protocol.py``), and answered by its action (``queue_actions.py``,
``message_actions.py``; ReceiveMessage by ``long_poll.py``). Anything that fails
answers SQS's error and writes nothing.
The older query protocol (form-encoded, XML answers) is refused with an XML error
that says so. Every answer is counted by action and status, with its latency
(``request_metrics.py``); ``GET /metrics`` answers those series and the rest of
this process's Prometheus registry, unsigned, as Prometheus scrapes.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from types import FrameType
from typing import Any
from xml.sax.saxutils import escape

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from spark_queue.client import QueueClient
from spark_queue.config import ConnectionSettings
from spark_queue.errors import SparkQueueError
from spark_queue.service import request_metrics, sigv4
from spark_queue.service.accounts import AccessKeys
from spark_queue.service.long_poll import receive_message
from spark_queue.service.message_actions import MESSAGE_ACTIONS
from spark_queue.service.move_tasks import DEAD_LETTER_ACTIONS
from spark_queue.service.protocol import (
    CONTENT_TYPE,
    TARGET_PREFIX,
    SqsError,
    action_of,
    decode_body,
    encode_body,
)
from spark_queue.service.queue_actions import QUEUE_ACTIONS, Action
from spark_queue.service.queue_urls import Caller
from spark_queue.service.queues import QueueBook
from spark_queue.service.tags import TAG_ACTIONS
from spark_queue.store.session import Store

log = logging.getLogger(__name__)

#: The actions answered in the thread pool (ReceiveMessage waits on the event loop instead).
ACTIONS: dict[str, Action] = {
    **QUEUE_ACTIONS,
    **MESSAGE_ACTIONS,
    **TAG_ACTIONS,
    **DEAD_LETTER_ACTIONS,
}
#: Every action answered: the values of the metrics' ``action`` label, with ``unknown``.
ANSWERED = frozenset({*ACTIONS, "ReceiveMessage"})
#: Largest request body read (a batch of ten 1 MiB messages is refused by size later).
MAX_BODY = 2 * 1024 * 1024 + 64 * 1024


class Service:
    """What the requests of one server process share: the store, the client, the keys."""

    def __init__(self, settings: ConnectionSettings) -> None:
        self.store = Store(settings)
        self.book = QueueBook(QueueClient(store=self.store), self.store)
        self.keys = AccessKeys(self.store)
        #: Set when the server begins to shut down: waiting receives return, empty.
        self.stopping = threading.Event()

    def close(self) -> None:
        """Release the queues' lanes and the connection."""
        try:
            self.book.client.close()
        finally:
            self.store.close()


def create_app(settings: ConnectionSettings) -> Starlette:
    """The ASGI app serving the keyspace of ``settings``; it connects at startup."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        service = await run_in_threadpool(Service, settings)
        app.state.service = service
        _stop_waits_on_signals(service.stopping)
        try:
            yield
        finally:
            service.stopping.set()
            await run_in_threadpool(service.close)

    return Starlette(
        routes=[
            Route("/metrics", metrics, methods=["GET"]),
            Route("/{path:path}", endpoint, methods=["GET", "POST", "PUT", "DELETE"]),
        ],
        lifespan=lifespan,
    )


def _stop_waits_on_signals(stopping: threading.Event) -> None:
    """Set ``stopping`` on SIGINT or SIGTERM, then let the server's own handler run.

    Uvicorn waits for requests in flight before it shuts the app down, so a
    long-polling receive would hold the shutdown for up to 20 s; this ends such
    waits at the signal. Signals reach the main thread only: elsewhere, nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGINT, signal.SIGTERM):
        previous = signal.getsignal(sig)

        def handler(number: int, frame: FrameType | None, previous: Any = previous) -> None:
            stopping.set()
            if callable(previous):
                previous(number, frame)
            else:  # no server handler: the signal's own disposition, as before
                signal.signal(number, previous)
                signal.raise_signal(number)

        signal.signal(sig, handler)


async def metrics(request: Request) -> Response:
    """Prometheus's text format of the service's series (no signature: a scrape)."""
    del request
    return Response(request_metrics.exposition(), media_type=CONTENT_TYPE_LATEST)


async def endpoint(request: Request) -> Response:
    """Answer one request (see the module docstring) and count it."""
    started = time.perf_counter()
    target = request.headers.get("x-amz-target", "")
    named = target.removeprefix(TARGET_PREFIX)
    action = named if named in ANSWERED else request_metrics.UNKNOWN_ACTION
    response = await _answer(request)
    request_metrics.observe(action, response.status_code, time.perf_counter() - started)
    return response


async def _answer(request: Request) -> Response:
    service: Service = request.app.state.service
    request_id = str(uuid.uuid4())
    if request.method != "POST" or "x-amz-target" not in request.headers:
        return _query_protocol_refused(request_id)
    try:
        body = await _body(request)
        caller = await _authenticate(service, request, body)
        action = action_of(request.headers.get("x-amz-target"))
        params = decode_body(body)
        if action == "ReceiveMessage":
            answer = await receive_message(service.book, caller, params, service.stopping)
        else:
            run = ACTIONS.get(action)
            if run is None:
                raise SqsError(
                    "UnknownOperationException",
                    f"Action {action!r}: not an SQS action this server answers (docs/service.md"
                    " lists them)",
                )
            answer = await run_in_threadpool(run, service.book, caller, params)
    except Exception as caught:
        e = caught if isinstance(caught, SqsError) else _internal(request_id, caught)
        if e.status >= 500:
            log.warning("request %s: %s: %s", request_id, e.shape, e.message)
        return Response(
            e.body(),
            status_code=e.status,
            media_type=CONTENT_TYPE,
            headers={**e.headers(), "x-amzn-RequestId": request_id},
        )
    return Response(
        encode_body(answer), media_type=CONTENT_TYPE, headers={"x-amzn-RequestId": request_id}
    )


def _internal(request_id: str, error: Exception) -> SqsError:
    """A bug or an unexpected failure: logged whole, answered as SQS's retryable 500."""
    log.exception("request %s failed", request_id, exc_info=error)
    return SqsError("InternalError", f"the server failed on request {request_id}; see its log")


async def _body(request: Request) -> bytes:
    size = request.headers.get("content-length")
    if size is not None and size.isdigit() and int(size) > MAX_BODY:
        raise SqsError("RequestEntityTooLarge", f"Request bodies are at most {MAX_BODY} bytes.")
    chunks, total = [], 0
    async for chunk in request.stream():
        total += len(chunk)
        if total > MAX_BODY:
            raise SqsError("RequestEntityTooLarge", f"Request bodies are at most {MAX_BODY} bytes.")
        chunks.append(chunk)
    return b"".join(chunks)


async def _authenticate(service: Service, request: Request, body: bytes) -> Caller:
    """The caller of a correctly signed request; SQS's error otherwise."""
    auth = sigv4.parse_authorization(request.headers.get("authorization"))
    try:
        found = await run_in_threadpool(service.keys.lookup, auth.access_key_id)
    except SparkQueueError as e:
        log.warning("looking up access key %s: %s", auth.access_key_id, e)
        raise SqsError("ServiceUnavailable", "the access keys could not be read") from e
    if found is None:
        raise SqsError(
            "InvalidClientTokenId",
            "The security token included in the request is invalid: unknown or revoked key"
            f" {auth.access_key_id}",
        )
    account, secret = found
    headers: list[tuple[str, str]] = [
        (k.decode("latin-1"), v.decode("latin-1")) for k, v in request.scope["headers"]
    ]
    raw_path = request.scope.get("raw_path") or request.url.path.encode()
    sigv4.verify(
        auth,
        secret,
        request.method,
        raw_path.decode("latin-1").split("?", 1)[0],
        request.scope.get("query_string", b"").decode("latin-1"),
        headers,
        body,
        datetime.now(UTC),
    )
    host = request.headers.get("host", f"{request.url.hostname}:{request.url.port}")
    return Caller(account, auth.region, f"{request.url.scheme}://{host}")


def _query_protocol_refused(request_id: str) -> Response:
    message = (
        "This server speaks SQS's AWS JSON 1.0 protocol only (POST / with X-Amz-Target:"
        " AmazonSQS.<Action>); the query protocol is not supported yet. Use a current AWS SDK"
        " or AWS CLI."
    )
    xml = (
        "<ErrorResponse><Error><Type>Sender</Type><Code>InvalidAction</Code>"
        f"<Message>{escape(message)}</Message></Error><RequestId>{request_id}</RequestId>"
        "</ErrorResponse>"
    )
    return Response(xml, status_code=400, media_type="text/xml")
