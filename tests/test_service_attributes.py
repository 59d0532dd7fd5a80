"""Message attributes of ``bdq serve`` (service/message_attributes.py): checks, headers, MD5."""

from __future__ import annotations

import hashlib

import pytest

from spark_queue.service.message_attributes import (
    from_headers,
    md5_of_attributes,
    md5_of_body,
    parse_attributes,
    selected,
)
from spark_queue.service.protocol import SqsError


def test_md5_of_attributes_is_sqs_encoding_sorted_by_name() -> None:
    # Given two attributes sent out of order, one String, one Binary
    attributes = parse_attributes(
        {
            "b": {"DataType": "Binary", "BinaryValue": "AQI="},  # bytes 01 02
            "a": {"DataType": "String", "StringValue": "hi"},
        }
    )
    # Then the digest is that of SQS's encoding, spelled out byte by byte
    expected = (
        b"\x00\x00\x00\x01a" + b"\x00\x00\x00\x06String" + b"\x01" + b"\x00\x00\x00\x02hi"
        b"\x00\x00\x00\x01b" + b"\x00\x00\x00\x06Binary" + b"\x02" + b"\x00\x00\x00\x02\x01\x02"
    )
    assert md5_of_attributes(attributes) == hashlib.md5(expected).hexdigest()


def test_a_custom_number_type_is_transported_as_a_string() -> None:
    [attribute] = parse_attributes({"n": {"DataType": "Number.float", "StringValue": "1.5"}})

    expected = b"\x00\x00\x00\x01n\x00\x00\x00\x0cNumber.float\x01\x00\x00\x00\x031.5"
    assert md5_of_attributes([attribute]) == hashlib.md5(expected).hexdigest()


def test_md5_of_body_is_of_its_utf8_bytes() -> None:
    assert md5_of_body("é") == hashlib.md5("é".encode()).hexdigest()


def test_attributes_round_trip_through_headers_exactly() -> None:
    given = parse_attributes(
        {
            "color": {"DataType": "String", "StringValue": "red: a:b"},
            "price": {"DataType": "Number", "StringValue": "-12.50"},
            "blob": {"DataType": "Binary.gz", "BinaryValue": "AAEC/w=="},
        }
    )
    headers = dict(a.header() for a in given)
    headers["unrelated"] = "kept apart"

    assert from_headers(headers) == given


@pytest.mark.parametrize(
    "attributes",
    [
        {"AWS.x": {"DataType": "String", "StringValue": "v"}},
        {"a..b": {"DataType": "String", "StringValue": "v"}},
        {"a": {"DataType": "Text", "StringValue": "v"}},
        {"a": {"DataType": "Number", "StringValue": "twelve"}},
        {"a": {"DataType": "String", "StringValue": ""}},
        {"a": {"DataType": "Binary", "BinaryValue": "not base64!"}},
        {f"a{i}": {"DataType": "String", "StringValue": "v"} for i in range(11)},
    ],
)
def test_bad_attributes_are_refused_as_sqs_refuses_them(attributes: dict[str, object]) -> None:
    with pytest.raises(SqsError) as caught:
        parse_attributes(attributes)

    assert caught.value.shape == "InvalidParameterValue"


def test_attribute_names_select_all_names_and_prefixes() -> None:
    attributes = parse_attributes(
        {n: {"DataType": "String", "StringValue": "v"} for n in ("a", "foo.x", "foo.y", "food")}
    )

    def names(*wanted: str) -> list[str]:
        return [a.name for a in selected(attributes, wanted)]

    assert names("All") == ["a", "foo.x", "foo.y", "food"]
    assert names(".*") == ["a", "foo.x", "foo.y", "food"]
    assert names("foo.*") == ["foo.x", "foo.y"]
    assert names("a", "food") == ["a", "food"]
    assert names("b") == []
