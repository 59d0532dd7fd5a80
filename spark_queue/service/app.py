"""The ASGI application of ``bdq serve``: ``POST`` in SQS's two protocols, and ``GET /metrics``.

Each request is, in order: read (at most ``MAX_BODY`` bytes), authenticated
(SigV4 against the key's stored secret, ``sigv4.py`` and ``accounts.py``), decoded
(AWS JSON 1.0 by ``protocol.py`` when it carries ``X-Amz-Target``, else the older
query protocol's form by ``query_protocol.py``, into the same parameters), and
answered by its action (``queue_actions.py``, ``message_actions.py``; ReceiveMessage
by ``long_poll.py``), once for both protocols; the answer or SQS's error is written
in the request's protocol (JSON, or XML). Anything that fails writes nothing.
Every answer is counted by action and status, with its latency (``request_metrics.py``);
``GET /metrics`` answers those series and the rest of this process's Prometheus
registry, unsigned, as Prometheus scrapes.
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

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from spark_queue.client import QueueClient
from spark_queue.config import ConnectionSettings
from spark_queue.errors import SparkQueueError
from spark_queue.service import query_protocol, request_metrics, sigv4
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
    answered = _Answered()
    response = await _answer(request, answered)
    action = answered.action if answered.action in ANSWERED else request_metrics.UNKNOWN_ACTION
    request_metrics.observe(action, response.status_code, time.perf_counter() - started)
    return response


class _Answered:
    """The action a request named, once known (the metrics' label)."""

    action = ""


async def _answer(request: Request, answered: _Answered) -> Response:
    service: Service = request.app.state.service
    request_id = str(uuid.uuid4())
    # A request without X-Amz-Target speaks the query protocol, and hears XML back.
    query = "x-amz-target" not in request.headers
    answered.action = request.headers.get("x-amz-target", "").removeprefix(TARGET_PREFIX)
    try:
        if request.method != "POST":
            raise SqsError(
                "InvalidAction",
                f"{request.method} {request.url.path}: SQS's requests are POST, with an"
                " X-Amz-Target header (AWS JSON 1.0) or an Action=... form (query protocol).",
            )
        body = await _body(request)
        caller = await _authenticate(service, request, body)
        if query:
            path = request.url.path
            posted_to = None if path in ("", "/") else caller.base_url + path
            action, params = query_protocol.decode_form(body, posted_to)
            answered.action = action
        else:
            action = action_of(request.headers.get("x-amz-target"))
            params = decode_body(body)
        answer = await _run(service, caller, action, params)
    except Exception as caught:
        e = caught if isinstance(caught, SqsError) else _internal(request_id, caught)
        if e.status >= 500:
            log.warning("request %s: %s: %s", request_id, e.shape, e.message)
        headers = {**e.headers(), "x-amzn-RequestId": request_id}
        if query:
            return Response(
                query_protocol.error_body(e, request_id),
                status_code=e.status,
                media_type=query_protocol.CONTENT_TYPE,
                headers=headers,
            )
        return Response(e.body(), status_code=e.status, media_type=CONTENT_TYPE, headers=headers)
    headers = {"x-amzn-RequestId": request_id}
    if query:
        xml = query_protocol.encode_answer(action, answer, request_id)
        return Response(xml, media_type=query_protocol.CONTENT_TYPE, headers=headers)
    return Response(encode_body(answer), media_type=CONTENT_TYPE, headers=headers)


async def _run(
    service: Service, caller: Caller, action: str, params: dict[str, Any]
) -> dict[str, Any]:
    """The answer of ``action``, whichever protocol carried it."""
    if action == "ReceiveMessage":
        return await receive_message(service.book, caller, params, service.stopping)
    run = ACTIONS.get(action)
    if run is None:
        raise SqsError(
            "UnknownOperationException",
            f"Action {action!r}: not an SQS action this server answers (docs/service.md"
            " lists them)",
        )
    return await run_in_threadpool(run, service.book, caller, params)


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
