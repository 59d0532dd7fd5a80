"""A receiver process of ``bdq bench faults``: receive, record, ack; maybe crash in between.

``python -m spark_queue.bench.faults_receiver --hosts ... --keyspace ... --queue Q
--out FILE --crash P --seed S``. Each received batch is recorded in ``FILE``,
one line per delivery: receive time, the receive's response time in ms (on the
batch's first line), sender, sequence number, and whether the payload's
checksum held (receives are plain polls, 50 ms apart while the queue
looks empty). Then, with probability ``P``, the process SIGKILLs itself before
acking: the batch's messages come back after the visibility timeout and arrive
again, as they would after a consumer crashed between processing and ack. The
bench restarts a receiver that died. SIGTERM ends it cleanly.

With ``--history FILE`` it also logs, for the history checker
(:mod:`spark_queue.bench.history`), every non-empty receive (its start and end
times, and each delivery's sender, sequence, id, receipt and ``visible_at``)
and every ack (a record as it begins; one as it ends, with which receipts were
acked or stale), one JSON object a line, flushed before the next step so that a
SIGKILL loses at most the operation under way. ``--hold H`` works on each batch for up to ``H``
seconds (drawn uniformly) before acking it, as a consumer doing real work would.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import time
from typing import TextIO

from spark_queue.bench.consistency import parse_payload
from spark_queue.bench.faultproxy import ProxyTranslator, open_queue
from spark_queue.config import ConnectionSettings
from spark_queue.errors import BackendUnavailable
from spark_queue.message import Delivery
from spark_queue.store.session import use_address_translator

#: Exit code of a receiver that lost its backend for good (the bench restarts it).
BACKEND_LOST = 3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hosts", required=True)
    parser.add_argument("--keyspace", required=True)
    parser.add_argument("--consistency", default="LOCAL_QUORUM")
    parser.add_argument("--queue", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--crash", type=float, default=0.0, help="SIGKILL chance per batch")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--visibility-timeout", type=float, default=5.0)
    parser.add_argument(
        "--translate", default="", help="node=proxy,...: talk through the bench's proxies"
    )
    parser.add_argument("--protocol", type=int, default=None, help="pin a protocol version")
    parser.add_argument("--history", default="", help="also log receives and acks here (JSON)")
    parser.add_argument("--hold", type=float, default=0.0, help="most seconds of work per batch")
    args = parser.parse_args(argv)

    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    rng = random.Random(args.seed)
    settings = ConnectionSettings.from_env(
        {},
        hosts=args.hosts,
        keyspace=args.keyspace,
        consistency=args.consistency,
        protocol_version=args.protocol,
    )
    if args.translate:
        routes = dict(pair.split("=", 1) for pair in args.translate.split(","))
        use_address_translator(ProxyTranslator(routes))
    errors = 0
    name = f"consumer-{os.getpid()}"
    with (
        open_queue(settings, args.queue) as client,
        open(args.out, "a") as out,
        open(args.history or os.devnull, "a") as history,
    ):
        queue = client.queue(args.queue)
        while not stopping:
            began = time.time()
            try:
                # no long poll: the response time is the receive's own, not a wait
                # for messages to arrive (the paper's receive response time)
                deliveries = queue.receive(args.batch, visibility_timeout=args.visibility_timeout)
            except BackendUnavailable:
                errors += 1
                if errors > 1000:
                    return BACKEND_LOST
                time.sleep(0.1)
                continue
            took = (time.time() - began) * 1000
            if not deliveries:
                time.sleep(0.05)
                continue
            now = time.time()
            if args.history:
                log_receive(history, name, began, now, deliveries)
            for i, d in enumerate(deliveries):
                parsed = parse_payload(d.payload)
                sender, seq = parsed if parsed else (-1, -1)
                # the response time once per receive call (-1 on the batch's other lines)
                ms = took if i == 0 else -1
                out.write(f"{now:.4f} {ms:.2f} {sender} {seq} {int(bool(parsed))} {d.id}\n")
            out.flush()
            os.fsync(out.fileno())  # what is recorded survives the kill below
            if rng.random() < args.crash:
                os.kill(os.getpid(), signal.SIGKILL)
            if args.hold:
                # a batch's work: a kill or a pause from outside lands between receive and ack
                time.sleep(rng.uniform(0.0, args.hold))
            acking = time.time()
            if args.history:
                log_ack_begin(history, name, acking, deliveries)
            stale: list[str] | None = None
            try:
                stale = queue.ack_batch([d.receipt for d in deliveries], strict=False)
            except BackendUnavailable:
                errors += 1  # the messages come back after the timeout: duplicates, no loss
            if args.history:
                log_acks(history, name, acking, time.time(), deliveries, stale)
    return 0


def log_receive(
    history: TextIO, name: str, start: float, end: float, deliveries: list[Delivery]
) -> None:
    """One receive's record for the history checker."""
    got = []
    for d in deliveries:
        sender, seq = parse_payload(d.payload) or (-1, -1)
        visible_at = d.visible_at.timestamp() if d.visible_at else end
        got.append(
            {
                "sender": sender,
                "seq": seq,
                "id": d.id,
                "receipt": d.receipt,
                "visible_at": visible_at,
            }
        )
    record = {"op": "receive", "process": name, "start": start, "end": end, "deliveries": got}
    history.write(json.dumps(record) + "\n")
    history.flush()  # in the kernel's hands: a SIGKILL of this process keeps it


def log_ack_begin(history: TextIO, name: str, start: float, deliveries: list[Delivery]) -> None:
    """An ack call about to begin: if no record of its end follows, it may or may not have acked."""
    acks = [{"id": d.id, "receipt": d.receipt} for d in deliveries]
    record = {"op": "ack-begin", "process": name, "start": start, "acks": acks}
    history.write(json.dumps(record) + "\n")
    history.flush()


def log_acks(
    history: TextIO,
    name: str,
    start: float,
    end: float,
    deliveries: list[Delivery],
    stale: list[str] | None,
) -> None:
    """One ack call's record: each receipt acked, stale, or unknown (``stale`` None: it raised)."""
    refused = set(stale or ())
    acks = [
        {
            "id": d.id,
            "receipt": d.receipt,
            "ok": None if stale is None else d.receipt not in refused,
        }
        for d in deliveries
    ]
    record = {"op": "ack", "process": name, "start": start, "end": end, "acks": acks}
    history.write(json.dumps(record) + "\n")
    history.flush()


if __name__ == "__main__":
    sys.exit(main())
