"""The orders of the sample pipeline: their JSON shape, the rules they must meet, and samples.

A valid order (the pipeline's input, one JSON object per message)::

    {"order_id": "o-1", "customer": "cust-0042", "created_at": "2025-01-01T12:00:00Z",
     "items": [{"sku": "SKU-0007", "qty": 2, "price": 9.5}]}

The rules, checked in the order of the ``REASON_*`` constants below: the payload
is a JSON object; its fields have the types above; ``order_id`` and ``customer``
are not blank; ``items`` is not empty; each item has a ``sku``, a ``qty`` from 1
to ``MAX_QTY`` and a ``price`` from 0 to ``MAX_PRICE``. The first rule broken is
the reason a message is rejected, sent in the ``reject-reason`` header of its
copy in ``orders-rejected``. Fields not shown above are dropped from shipments.

The pipeline (``jobs/order_routing.py``) checks these rules with Spark SQL; this
module only names them, and makes sample orders without needing Spark.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import count as counter
from typing import Any

from spark_queue.errors import InvalidSetting

REASON_NOT_JSON = "not a JSON object"
REASON_WRONG_TYPE = (
    "a field has the wrong type (order_id and customer: strings; items: a list of"
    " {sku: string, qty: whole number, price: number})"
)
REASON_NO_ORDER_ID = "order_id is missing or empty"
REASON_NO_CUSTOMER = "customer is missing or empty"
REASON_NO_ITEMS = "items is missing or empty"
REASON_NO_SKU = "an item has no sku"
REASON_BAD_QTY = "an item's qty is missing or not from 1 to 10000"
REASON_BAD_PRICE = "an item's price is missing or not from 0 to 1000000"

#: Bounds of an item's qty and price. They also keep the sums of a valid order
#: from overflowing (with ANSI SQL, an overflow would fail the whole micro-batch).
MAX_QTY = 10_000
MAX_PRICE = 1_000_000

#: Header of a rejected order: the rule it broke.
HEADER_REASON = "reject-reason"
#: Header of every pipeline output: id of the order message in the input queue.
HEADER_SOURCE_ID = "source-id"
#: Header of a shipment: its order_id.
HEADER_ORDER_ID = "order-id"

#: Fields the pipeline adds to a valid order.
ENRICHED_FIELDS = ("item_count", "line_count", "total", "processed_at", "source_id")


@dataclass(frozen=True)
class SampleOrder:
    """One generated order message.

    Attributes:
        order_id: The id it was generated with (absent from some malformed payloads).
        payload: The message body.
        reason: The reason the pipeline must reject it with, or None if it is valid.
        total: Sum of qty * price of a valid order, else None.
    """

    order_id: str
    payload: bytes
    reason: str | None = None
    total: float | None = None


def _valid(order_id: str, rng: random.Random) -> dict[str, Any]:
    items = [
        {
            "sku": f"SKU-{rng.randrange(10_000):04d}",
            "qty": rng.randint(1, 5),
            "price": round(rng.uniform(1, 200), 2),
        }
        for _ in range(rng.randint(1, 4))
    ]
    return {
        "order_id": order_id,
        "customer": f"cust-{rng.randrange(1000):04d}",
        "created_at": datetime.now(UTC).isoformat(timespec="milliseconds"),
        "items": items,
    }


def _encode(order: dict[str, Any]) -> str:
    return json.dumps(order, separators=(",", ":"))


def _truncated(order: dict[str, Any]) -> str:
    text = _encode(order)
    return text[: len(text) // 2]


def _plain_text(order: dict[str, Any]) -> str:
    return f"order {order['order_id']} for {order['customer']}"


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], str]:
    """A defect that sets (or, with ``...``, removes) one field, ``items.0.qty`` style."""

    def apply(order: dict[str, Any]) -> str:
        *parents, last = path.split(".")
        target: Any = order
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if value is ...:
            del target[last]
        else:
            target[last] = value
        return _encode(order)

    return apply


#: How malformed orders are made, with the reason the pipeline must give; used in turn.
DEFECTS: tuple[tuple[str, Callable[[dict[str, Any]], str]], ...] = (
    (REASON_NOT_JSON, _truncated),
    (REASON_NO_CUSTOMER, _set("customer", ...)),
    (REASON_BAD_QTY, _set("items.0.qty", 0)),
    (REASON_WRONG_TYPE, _set("items.0.qty", "two")),
    (REASON_NO_ITEMS, _set("items", [])),
    (REASON_NO_SKU, _set("items.0.sku", ...)),
    (REASON_NO_ORDER_ID, _set("order_id", "")),
    (REASON_BAD_PRICE, _set("items.0.price", -1.5)),
    (REASON_NOT_JSON, _plain_text),
)


def sample_orders(
    total: int | None,
    malformed_fraction: float = 0.05,
    *,
    seed: int | None = None,
    prefix: str = "o",
) -> Iterator[SampleOrder]:
    """Generate orders, a given share of them malformed (spread evenly, each defect in turn).

    Args:
        total: How many; None for no end.
        malformed_fraction: Share of malformed orders, 0 to 1: of the first
            ``n`` orders, ``floor(n * fraction)`` are malformed.
        seed: Seed of the random contents (same seed, same orders but ``created_at``).
        prefix: Start of every ``order_id`` (``<prefix>-<n>``); use one per run
            so that ids do not repeat across runs.
    """
    if not 0 <= malformed_fraction <= 1:
        raise InvalidSetting(f"malformed_fraction {malformed_fraction!r}: must be from 0 to 1")
    rng = random.Random(seed)
    malformed = 0
    for n in counter() if total is None else range(total):
        order_id = f"{prefix}-{n:07d}"
        order = _valid(order_id, rng)
        if int((n + 1) * malformed_fraction + 1e-9) > malformed:  # 1e-9: 0.07 * 100 < 7
            reason, defect = DEFECTS[malformed % len(DEFECTS)]
            malformed += 1
            yield SampleOrder(order_id, defect(order).encode(), reason)
        else:
            total_price = sum(item["qty"] * item["price"] for item in order["items"])
            yield SampleOrder(order_id, _encode(order).encode(), None, round(total_price, 2))
