"""The pipeline's transformation: order messages checked and enriched with Spark SQL, then routed.

``route_orders`` turns rows of the bdq source into rows for the bdq sink:
each order is parsed with ``from_json`` and checked against the rules of
``jobs/orders.py`` with Spark SQL expressions (no Python UDF, so rows stay in
the JVM); a valid one becomes a shipment, any other message goes unchanged to
the rejected queue with the broken rule in its ``reject-reason`` header.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    DoubleType,
    IntegerType,
    StringType,
    StructField,
    StructType,
)

from jobs import orders as rules

#: Name of the observed metrics that count orders per batch.
METRICS = "orders"
_CORRUPT = "_corrupt_record"


def order_schema() -> StructType:
    """The JSON shape ``from_json`` parses orders with (plus the corrupt-record column)."""
    item = StructType(
        [
            StructField("sku", StringType()),
            StructField("qty", IntegerType()),
            StructField("price", DoubleType()),
        ]
    )
    return StructType(
        [
            StructField("order_id", StringType()),
            StructField("customer", StringType()),
            StructField("created_at", StringType()),
            StructField("items", ArrayType(item)),
            StructField(_CORRUPT, StringType()),
        ]
    )


def _blank(column: Column) -> Column:
    return F.coalesce(F.trim(column), F.lit("")) == ""


def _outside(value: Column, low: float, high: float) -> Column:
    """True when ``value`` is null or not in ``[low, high]`` (NaN sorts above every number)."""
    return ~F.coalesce(value.between(low, high), F.lit(False))


def reject_reason(text: Column, order: Column) -> Column:
    """The first rule of ``jobs/orders.py`` the order breaks, or null for a valid order."""
    items = order["items"]
    return (
        # json_object_keys is null for invalid JSON and for JSON that is not an object.
        F.when(F.json_object_keys(text).isNull(), rules.REASON_NOT_JSON)
        .when(order[_CORRUPT].isNotNull(), rules.REASON_WRONG_TYPE)
        .when(_blank(order["order_id"]), rules.REASON_NO_ORDER_ID)
        .when(_blank(order["customer"]), rules.REASON_NO_CUSTOMER)
        .when(items.isNull() | (F.size(items) == 0), rules.REASON_NO_ITEMS)
        .when(F.exists(items, lambda i: i.isNull() | _blank(i["sku"])), rules.REASON_NO_SKU)
        .when(F.exists(items, lambda i: _outside(i["qty"], 1, rules.MAX_QTY)), rules.REASON_BAD_QTY)
        .when(
            F.exists(items, lambda i: _outside(i["price"], 0, rules.MAX_PRICE)),
            rules.REASON_BAD_PRICE,
        )
    )


def shipment_json(order: Column, source_id: Column) -> Column:
    """A valid order as the JSON of a shipment: the order plus the fields of ``ENRICHED_FIELDS``."""
    items = order["items"]
    money = "decimal(18,2)"
    total = F.aggregate(
        items,
        F.lit(0).cast(money),
        lambda acc, i: (acc + i["qty"] * i["price"].cast("decimal(12,2)")).cast(money),
    )
    return F.to_json(
        F.struct(
            order["order_id"].alias("order_id"),
            order["customer"].alias("customer"),
            order["created_at"].alias("created_at"),
            items.alias("items"),
            F.aggregate(items, F.lit(0), lambda acc, i: acc + i["qty"]).alias("item_count"),
            F.size(items).alias("line_count"),
            total.alias("total"),
            # The micro-batch's timestamp: a replayed batch produces the same payloads.
            F.current_timestamp().alias("processed_at"),
            source_id.alias("source_id"),
        )
    )


def route_orders(orders: DataFrame, shipments: str, rejected: str) -> DataFrame:
    """Order messages (the bdq source's schema) as rows for the bdq sink.

    Returns:
        Columns ``payload`` (binary), ``queue``, ``headers`` and ``key``: the
        enriched order to ``shipments``, or the original payload to ``rejected``
        with ``reject-reason``; either under the order message's key (null
        when it had none). Observed metrics named ``orders`` count ``in``,
        ``shipped`` and ``rejected`` per micro-batch.
    """
    text = F.col("payload").cast("string")
    parsed = F.from_json(
        text, order_schema(), {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT}
    )
    checked = orders.select(
        "id", "key", "payload", text.alias("text"), parsed.alias("order")
    ).select("*", reject_reason(F.col("text"), F.col("order")).alias("reason"))
    valid = F.col("reason").isNull()
    counted = checked.observe(
        METRICS,
        F.count(F.lit(1)).alias("in"),
        F.count_if(valid).alias("shipped"),
        F.count_if(~valid).alias("rejected"),
    )
    source_id = F.col("id").cast("string")
    return counted.select(
        F.when(valid, shipment_json(F.col("order"), F.col("id")).cast("binary"))
        .otherwise(F.col("payload"))
        .alias("payload"),
        F.when(valid, F.lit(shipments)).otherwise(F.lit(rejected)).alias("queue"),
        F.when(
            valid,
            F.create_map(
                F.lit(rules.HEADER_ORDER_ID),
                F.col("order.order_id"),
                F.lit(rules.HEADER_SOURCE_ID),
                source_id,
            ),
        )
        .otherwise(
            F.create_map(
                F.lit(rules.HEADER_REASON),
                F.col("reason"),
                F.lit(rules.HEADER_SOURCE_ID),
                source_id,
            )
        )
        .alias("headers"),
        F.col("key"),  # the same key, so the order's messages keep their order downstream
    )
