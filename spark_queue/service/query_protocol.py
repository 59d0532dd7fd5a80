"""SQS's older query protocol: form-encoded requests, XML answers and errors.

A request is ``POST /`` (or ``POST`` to a queue's URL, which then stands for its
``QueueUrl``) with an ``application/x-www-form-urlencoded`` body of
``Action=<Action>&Version=2012-11-05&...``; SigV4 signs the body exactly as it
signs a JSON one. Lists and maps are flattened into numbered names:
``AttributeName.1``, ``Attribute.1.Name`` and ``Attribute.1.Value``,
``MessageAttribute.1.Value.StringValue``, ``SendMessageBatchRequestEntry.2.Id``.

``decode_form`` turns such a form into the parameters the JSON protocol carries
(``AttributeNames``, ``Attributes``, ``MessageAttributes``, ``Entries``, ...), so
that every action is written once and answers both protocols; ``encode_answer``
writes an action's JSON answer as SQS's XML (``<SendMessageResponse>
<SendMessageResult>...</SendMessageResult><ResponseMetadata>...``), and
``error_body`` an error as ``<ErrorResponse>``. Numbers stay strings in the
decoded parameters: ``protocol.integer`` reads both forms.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from typing import Any
from xml.sax.saxutils import escape

from spark_queue.service.protocol import SqsError, invalid

CONTENT_TYPE = "text/xml"
VERSION = "2012-11-05"
_NAMESPACE = f"http://queue.amazonaws.com/doc/{VERSION}/"

#: Flattened lists: the query name of one member -> the JSON parameter.
_LISTS: Mapping[str, str] = {
    "AttributeName": "AttributeNames",
    "MessageAttributeName": "MessageAttributeNames",
    "MessageSystemAttributeName": "MessageSystemAttributeNames",
    "TagKey": "TagKeys",
    "SendMessageBatchRequestEntry": "Entries",
    "DeleteMessageBatchRequestEntry": "Entries",
    "ChangeMessageVisibilityBatchRequestEntry": "Entries",
    "StringListValue": "StringListValues",
    "BinaryListValue": "BinaryListValues",
    "AWSAccountId": "AWSAccountIds",
    "ActionName": "Actions",
}
#: Flattened maps: the query name of one entry -> (JSON parameter, key name, value name).
_MAPS: Mapping[str, tuple[str, str, str]] = {
    "Attribute": ("Attributes", "Name", "Value"),
    "MessageAttribute": ("MessageAttributes", "Name", "Value"),
    "MessageSystemAttribute": ("MessageSystemAttributes", "Name", "Value"),
    "Tag": ("Tags", "Key", "Value"),
}
#: Top-level JSON names an action spells otherwise (SQS's model names CreateQueue's ``tags``).
_RENAMED: Mapping[str, Mapping[str, str]] = {"CreateQueue": {"Tags": "tags"}}

#: An answer's lists and maps, by JSON name -> the XML element of one member or entry
#: (``None``: the action's own ``<Action>ResultEntry``).
_XML_LISTS: Mapping[str, str | None] = {
    "Messages": "Message",
    "QueueUrls": "QueueUrl",
    "queueUrls": "QueueUrl",
    "Successful": None,
    "Failed": "BatchResultErrorEntry",
    "Results": "ListMessageMoveTasksResultEntry",
    "StringListValues": "StringListValue",
    "BinaryListValues": "BinaryListValue",
}
_XML_MAPS: Mapping[str, tuple[str, str, str]] = {
    "Attributes": ("Attribute", "Name", "Value"),
    "MessageAttributes": ("MessageAttribute", "Name", "Value"),
    "Tags": ("Tag", "Key", "Value"),
}
#: Actions whose answer has no result element, only the request id.
_NO_RESULT = frozenset(
    {
        "AddPermission",
        "ChangeMessageVisibility",
        "DeleteMessage",
        "DeleteQueue",
        "PurgeQueue",
        "RemovePermission",
        "SetQueueAttributes",
        "TagQueue",
        "UntagQueue",
    }
)


def decode_form(body: bytes, queue_url: str | None) -> tuple[str, dict[str, Any]]:
    """The action a query request names and its parameters, shaped as the JSON protocol's.

    Args:
        body: The form-encoded request body.
        queue_url: The URL the request was posted to when that was a queue's, which
            stands for ``QueueUrl`` unless the form names one.

    Raises:
        SqsError: ``InvalidAction`` without an ``Action``, ``InvalidParameterValue``
            for a malformed form, another ``Version`` or an inconsistent numbering.
    """
    try:
        pairs = urllib.parse.parse_qsl(
            body.decode("utf-8"), keep_blank_values=True, strict_parsing=bool(body)
        )
    except (UnicodeDecodeError, ValueError) as e:
        raise invalid(f"the request body is not a UTF-8 form (name=value&...): {e}") from e
    tree: dict[str, Any] = {}
    for name, value in pairs:
        _place(tree, name, value)
    action = tree.pop("Action", None)
    if not isinstance(action, str) or not action:
        raise SqsError(
            "InvalidAction",
            "The request must name its action: Action=<Action> in a form body, or the"
            " X-Amz-Target header of AWS JSON 1.0.",
        )
    version = tree.pop("Version", VERSION)
    if version != VERSION:
        raise invalid(f"Version {version!r}: this server speaks SQS's API version {VERSION}.")
    params = _structure(tree)
    for json_name, own_name in _RENAMED.get(action, {}).items():
        if json_name in params:
            params[own_name] = params.pop(json_name)
    if queue_url is not None:
        params.setdefault("QueueUrl", queue_url)
    return action, params


def _place(tree: dict[str, Any], name: str, value: str) -> None:
    """Put ``value`` at the dotted ``name`` of the tree (``Attribute.1.Name``)."""
    *path, last = name.split(".")
    node = tree
    for part in path:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise invalid(f"parameter {name!r}: a prefix of it was given a value of its own")
    if last in node:
        raise invalid(f"parameter {name!r}: given twice, or also used as a prefix")
    node[last] = value


def _structure(node: dict[str, Any]) -> dict[str, Any]:
    decoded: dict[str, Any] = {}
    for name, value in node.items():
        if name in _MAPS:
            json_name, key_name, value_name = _MAPS[name]
            decoded[json_name] = _map(name, value, key_name, value_name)
        elif name in _LISTS:
            decoded[_LISTS[name]] = [_member(m) for m in _members(name, value)]
        else:
            decoded[name] = _member(value)
    return decoded


def _member(value: str | dict[str, Any]) -> Any:
    return value if isinstance(value, str) else _structure(value)


def _members(name: str, value: str | dict[str, Any]) -> list[Any]:
    """A flattened list's members in the order of their numbers (1, 2, ...)."""
    if not isinstance(value, dict) or not all(k.isdigit() and int(k) > 0 for k in value):
        raise invalid(
            f"parameter {name!r}: a list is given as {name}.1, {name}.2, ..., numbered from 1"
        )
    return [value[k] for k in sorted(value, key=int)]


def _map(name: str, value: str | dict[str, Any], key_name: str, value_name: str) -> dict[str, Any]:
    decoded: dict[str, Any] = {}
    for n, entry in enumerate(_members(name, value), start=1):
        key = entry.get(key_name) if isinstance(entry, dict) else None
        if (
            not isinstance(key, str)
            or value_name not in entry
            or set(entry)
            - {
                key_name,
                value_name,
            }
        ):
            raise invalid(
                f"parameter {name}.{n}: a map entry is {name}.{n}.{key_name} and"
                f" {name}.{n}.{value_name}, nothing else"
            )
        decoded[key] = _member(entry[value_name])
    return decoded


# -- answers ---------------------------------------------------------------------------


def encode_answer(action: str, answer: Mapping[str, Any], request_id: str) -> bytes:
    """An action's answer (the JSON protocol's object) as SQS's XML response."""
    parts = [f'<{action}Response xmlns="{_NAMESPACE}">']
    if action not in _NO_RESULT:
        parts.append(f"<{action}Result>")
        _fields(parts, action, answer)
        parts.append(f"</{action}Result>")
    parts.append(
        f"<ResponseMetadata><RequestId>{request_id}</RequestId></ResponseMetadata>"
        f"</{action}Response>"
    )
    return "".join(parts).encode()


def error_body(error: SqsError, request_id: str) -> bytes:
    """An error as SQS's XML ``ErrorResponse``, with the query protocol's code."""
    return (
        f'<ErrorResponse xmlns="{_NAMESPACE}"><Error><Type>{error.fault}</Type>'
        f"<Code>{_text(error.query_code)}</Code><Message>{_text(error.message)}</Message>"
        f"<Detail/></Error><RequestId>{request_id}</RequestId></ErrorResponse>"
    ).encode()


def _fields(parts: list[str], action: str, structure: Mapping[str, Any]) -> None:
    for name, value in structure.items():
        if name in _XML_MAPS and isinstance(value, Mapping):
            element, key_name, value_name = _XML_MAPS[name]
            for key, item in value.items():
                parts.append(f"<{element}><{key_name}>{_text(key)}</{key_name}><{value_name}>")
                _value(parts, action, item)
                parts.append(f"</{value_name}></{element}>")
        elif name in _XML_LISTS and isinstance(value, list):
            element = _XML_LISTS[name] or f"{action}ResultEntry"
            for item in value:
                parts.append(f"<{element}>")
                _value(parts, action, item)
                parts.append(f"</{element}>")
        else:
            parts.append(f"<{name}>")
            _value(parts, action, value)
            parts.append(f"</{name}>")


def _value(parts: list[str], action: str, value: Any) -> None:
    if isinstance(value, Mapping):
        _fields(parts, action, value)
    elif isinstance(value, bool):
        parts.append("true" if value else "false")
    else:
        parts.append(_text(str(value)))


def _text(value: str) -> str:
    # A parser turns a raw carriage return into a line feed, which would change a
    # body whose MD5 the client checks; SQS writes it as a character reference.
    return escape(value).replace("\r", "&#xD;")
