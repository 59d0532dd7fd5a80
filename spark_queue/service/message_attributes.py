"""Typed message attributes: checked as SQS checks them, kept in headers, and their MD5.

An SQS message carries up to 10 attributes, each a name, a data type (``String``,
``Number``, ``Binary``, or one of them with a custom label: ``String.json``) and a
value. The queue's headers are plain strings, so each attribute is kept as one
header under a reserved prefix::

    sqs-attr.<Name> = <DataType>:<value>        (a Binary value in base64)

which any consumer (the Spark source, ``bdq receive``) can read back, and which
comes back from ReceiveMessage exactly as it was sent. The account that sent a
message is kept in the header ``sqs-sender`` (SQS's ``SenderId``).

``MD5OfMessageAttributes`` is SQS's: the attributes sorted by name, each written as
a 4-byte big-endian length and the name, the same for the data type, one transport
byte (1 for String and Number, 2 for Binary) and the length and the value.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from spark_queue.service.protocol import SqsError, invalid

#: The header prefix of the attributes, and the header of the sender's account.
ATTRIBUTE_PREFIX = "sqs-attr."
SENDER_HEADER = "sqs-sender"
MAX_ATTRIBUTES = 10
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,256}")
_TYPE = re.compile(r"(String|Number|Binary)(\.[A-Za-z0-9_.-]+)?")


@dataclass(frozen=True, slots=True)
class Attribute:
    """One typed attribute: ``value`` is text for String and Number types, bytes for Binary."""

    name: str
    data_type: str
    value: str | bytes

    @property
    def binary(self) -> bool:
        """Whether its base type is Binary."""
        return self.data_type.startswith("Binary")

    def size(self) -> int:
        """Bytes it adds to the message's size, as SQS counts them."""
        raw = self.value if isinstance(self.value, bytes) else self.value.encode()
        return len(self.name.encode()) + len(self.data_type.encode()) + len(raw)

    def to_json(self) -> dict[str, str]:
        """Its ``MessageAttributeValue`` of the JSON protocol (a blob in base64)."""
        if isinstance(self.value, bytes):
            return {
                "DataType": self.data_type,
                "BinaryValue": base64.b64encode(self.value).decode(),
            }
        return {"DataType": self.data_type, "StringValue": self.value}

    def header(self) -> tuple[str, str]:
        """The header that keeps it."""
        if isinstance(self.value, bytes):
            return (
                ATTRIBUTE_PREFIX + self.name,
                f"{self.data_type}:{base64.b64encode(self.value).decode()}",
            )
        return ATTRIBUTE_PREFIX + self.name, f"{self.data_type}:{self.value}"


def parse_attributes(given: object) -> list[Attribute]:
    """``MessageAttributes`` of a request, checked; SQS's error names the first bad one."""
    if given is None:
        return []
    if not isinstance(given, dict):
        raise invalid("MessageAttributes must be a map of name to MessageAttributeValue.")
    if len(given) > MAX_ATTRIBUTES:
        raise invalid(
            f"Number of message attributes [{len(given)}] exceeds the allowed maximum"
            f" [{MAX_ATTRIBUTES}]."
        )
    return sorted((_attribute(name, value) for name, value in given.items()), key=lambda a: a.name)


def _attribute(name: object, value: object) -> Attribute:
    if (
        not isinstance(name, str)
        or not _NAME.fullmatch(name)
        or name.startswith(".")
        or name.endswith(".")
        or ".." in name
        or name.lower().startswith(("aws.", "amazon."))
    ):
        raise invalid(
            f"Message attribute name {name!r} is invalid: 1-256 of A-Z a-z 0-9 _ - ., not"
            " starting or ending with '.', no '..', not starting with 'AWS.' or 'Amazon.'."
        )
    if not isinstance(value, dict):
        raise invalid(f"Message attribute {name!r} must be a MessageAttributeValue.")
    data_type = value.get("DataType")
    if not isinstance(data_type, str) or len(data_type) > 256 or not _TYPE.fullmatch(data_type):
        raise invalid(
            f"The message attribute {name!r} has an invalid message attribute type {data_type!r}:"
            " String, Number or Binary, optionally with a custom label such as 'String.json'."
        )
    if value.get("StringListValues") or value.get("BinaryListValues"):
        raise invalid(f"Message attribute {name!r}: list values are not supported.")
    if data_type.startswith("Binary"):
        blob = value.get("BinaryValue")
        if not isinstance(blob, str) or not blob:
            raise invalid(
                f"The message attribute {name!r} with type 'Binary' must use field 'Binary'."
            )
        try:
            raw = base64.b64decode(blob, validate=True)
        except (binascii.Error, ValueError) as e:
            raise invalid(f"Message attribute {name!r}: BinaryValue is not base64.") from e
        return Attribute(name, data_type, raw)
    text = value.get("StringValue")
    if not isinstance(text, str) or not text:
        raise invalid(
            f"The message attribute {name!r} must contain a non-empty message attribute value."
        )
    check_characters(text, f"message attribute {name!r}")
    if data_type.startswith("Number"):
        try:
            number = Decimal(text)
        except InvalidOperation as e:
            raise invalid(
                f"Can't convert {text!r} of message attribute {name!r} to a number."
            ) from e
        if not number.is_finite():
            raise invalid(f"Message attribute {name!r}: {text!r} is not a finite number.")
    return Attribute(name, data_type, text)


def check_characters(text: str, what: str) -> None:
    """SQS's allowed characters: #x9 #xA #xD #x20-#xD7FF #xE000-#xFFFD #x10000-#x10FFFF."""
    for ch in text:
        o = ord(ch)
        if not (
            o in (0x9, 0xA, 0xD)
            or 0x20 <= o <= 0xD7FF
            or 0xE000 <= o <= 0xFFFD
            or 0x10000 <= o <= 0x10FFFF
        ):
            raise SqsError(
                "InvalidMessageContents",
                f"Invalid characters found in {what}: U+{o:04X} is not allowed.",
            )


def from_headers(headers: Mapping[str, str]) -> list[Attribute]:
    """The attributes kept in a message's headers, sorted by name (others are skipped)."""
    found = []
    for key, kept in headers.items():
        if not key.startswith(ATTRIBUTE_PREFIX):
            continue
        data_type, sep, value = kept.partition(":")
        if not sep or not _TYPE.fullmatch(data_type):
            continue  # not written by the service: leave it alone
        name = key[len(ATTRIBUTE_PREFIX) :]
        if data_type.startswith("Binary"):
            try:
                found.append(Attribute(name, data_type, base64.b64decode(value)))
            except (binascii.Error, ValueError):
                continue
        else:
            found.append(Attribute(name, data_type, value))
    return sorted(found, key=lambda a: a.name)


def selected(attributes: Iterable[Attribute], names: Iterable[str]) -> list[Attribute]:
    """Those ReceiveMessage's ``MessageAttributeNames`` ask for (``All``, ``.*``, ``foo.*``)."""
    wanted = list(names)
    if "All" in wanted or ".*" in wanted:
        return list(attributes)
    exact = {n for n in wanted if not n.endswith(".*")}
    prefixes = tuple(n[:-1] for n in wanted if n.endswith(".*"))  # keeps the dot
    return [a for a in attributes if a.name in exact or (prefixes and a.name.startswith(prefixes))]


def md5_of_attributes(attributes: Iterable[Attribute]) -> str | None:
    """SQS's ``MD5OfMessageAttributes`` (see the module docstring); None when there are none."""
    ordered = sorted(attributes, key=lambda a: a.name)
    if not ordered:
        return None
    digest = hashlib.md5(usedforsecurity=False)
    for a in ordered:
        for part in (a.name.encode(), a.data_type.encode()):
            digest.update(struct.pack(">I", len(part)) + part)
        raw = a.value if isinstance(a.value, bytes) else a.value.encode()
        digest.update(b"\x02" if a.binary else b"\x01")
        digest.update(struct.pack(">I", len(raw)) + raw)
    return digest.hexdigest()


def md5_of_body(body: str) -> str:
    """SQS's ``MD5OfMessageBody``: the hex MD5 of the body's UTF-8 bytes."""
    return hashlib.md5(body.encode(), usedforsecurity=False).hexdigest()


def json_attributes(attributes: Iterable[Attribute]) -> dict[str, Any]:
    """``MessageAttributes`` of an answer."""
    return {a.name: a.to_json() for a in attributes}
