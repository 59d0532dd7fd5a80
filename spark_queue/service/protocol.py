"""SQS's AWS JSON 1.0 protocol: what a request carries, how answers and errors are written.

Its parameters are the actions' common currency: ``query_protocol.py`` decodes the
older query protocol's forms into the same parameters, read by the helpers below.

A request is ``POST /`` with ``X-Amz-Target: AmazonSQS.<Action>`` and a JSON object
body (``Content-Type: application/x-amz-json-1.0``). An answer is a JSON object; an
error is ``{"__type": "com.amazonaws.sqs#<Shape>", "message": ...}`` with SQS's HTTP
status and the ``x-amzn-query-error: <code>;Sender`` header, from which SDKs take the
error code of the older query protocol (``AWS.SimpleQueueService.NonExistentQueue``
for ``QueueDoesNotExist``) while their exception classes follow the shape name.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

CONTENT_TYPE = "application/x-amz-json-1.0"
TARGET_PREFIX = "AmazonSQS."

#: Shape name -> (HTTP status, the query protocol's code), for SQS's documented errors.
_ERRORS: Mapping[str, tuple[int, str]] = {
    "QueueDoesNotExist": (400, "AWS.SimpleQueueService.NonExistentQueue"),
    "QueueNameExists": (400, "QueueAlreadyExists"),
    "ReceiptHandleIsInvalid": (400, "ReceiptHandleIsInvalid"),
    "TooManyEntriesInBatchRequest": (400, "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"),
    "BatchEntryIdsNotDistinct": (400, "AWS.SimpleQueueService.BatchEntryIdsNotDistinct"),
    "EmptyBatchRequest": (400, "AWS.SimpleQueueService.EmptyBatchRequest"),
    "InvalidBatchEntryId": (400, "AWS.SimpleQueueService.InvalidBatchEntryId"),
    "BatchRequestTooLong": (400, "AWS.SimpleQueueService.BatchRequestTooLong"),
    "MessageNotInflight": (400, "AWS.SimpleQueueService.MessageNotInflight"),
    "UnsupportedOperation": (400, "AWS.SimpleQueueService.UnsupportedOperation"),
    "ResourceNotFoundException": (400, "ResourceNotFoundException"),
    "InvalidAttributeName": (400, "InvalidAttributeName"),
    "InvalidAttributeValue": (400, "InvalidAttributeValue"),
    "InvalidMessageContents": (400, "InvalidMessageContents"),
    "InvalidAddress": (400, "InvalidAddress"),
    "InvalidParameterValue": (400, "InvalidParameterValue"),
    "MissingParameter": (400, "MissingParameter"),
    "InvalidAction": (400, "InvalidAction"),
    "UnknownOperationException": (400, "InvalidAction"),
    "SerializationException": (400, "SerializationException"),
    "RequestEntityTooLarge": (413, "RequestEntityTooLarge"),
    "MissingAuthenticationToken": (403, "MissingAuthenticationToken"),
    "IncompleteSignature": (400, "IncompleteSignature"),
    "InvalidClientTokenId": (403, "InvalidClientTokenId"),
    "SignatureDoesNotMatch": (403, "SignatureDoesNotMatch"),
    "AccessDenied": (403, "AccessDenied"),
    "ServiceUnavailable": (503, "ServiceUnavailable"),
    "InternalError": (500, "InternalError"),
}


class SqsError(Exception):
    """An error answered to the client as SQS answers it; nothing was written.

    Args:
        shape: SQS's error shape name (``QueueDoesNotExist``), a key of the table above.
        message: One line for the client: the value, the rule, the fix.
    """

    def __init__(self, shape: str, message: str) -> None:
        if shape not in _ERRORS:
            raise ValueError(f"error shape {shape!r}: not one this service answers")
        super().__init__(message)
        self.shape = shape
        self.message = message

    @property
    def status(self) -> int:
        """The HTTP status SQS answers this error with."""
        return _ERRORS[self.shape][0]

    @property
    def query_code(self) -> str:
        """The error code of the query protocol, sent in ``x-amzn-query-error``."""
        return _ERRORS[self.shape][1]

    @property
    def fault(self) -> str:
        """Whose fault SQS says it is: ``Sender`` (4xx) or ``Receiver`` (5xx)."""
        return "Receiver" if self.status >= 500 else "Sender"

    def body(self) -> bytes:
        """The JSON body of the answer."""
        document = {"__type": f"com.amazonaws.sqs#{self.shape}", "message": self.message}
        return json.dumps(document).encode()

    def headers(self) -> dict[str, str]:
        """The answer's headers, beside the content type."""
        return {"x-amzn-query-error": f"{self.query_code};{self.fault}"}


def invalid(message: str) -> SqsError:
    """``InvalidParameterValue``, SQS's error for most bad values."""
    return SqsError("InvalidParameterValue", message)


def action_of(target: str | None) -> str:
    """The action named by ``X-Amz-Target``; UnknownOperationException otherwise."""
    if not target or not target.startswith(TARGET_PREFIX) or len(target) == len(TARGET_PREFIX):
        raise SqsError(
            "UnknownOperationException",
            f"X-Amz-Target {target!r}: must be AmazonSQS.<Action>, such as AmazonSQS.SendMessage",
        )
    return target[len(TARGET_PREFIX) :]


def decode_body(body: bytes) -> dict[str, Any]:
    """The request's JSON object; SerializationException when it is not one."""
    try:
        document = json.loads(body or b"{}")
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SqsError("SerializationException", f"the request body is not valid JSON: {e}") from e
    if not isinstance(document, dict):
        raise SqsError(
            "SerializationException",
            f"the request body must be a JSON object, not {type(document).__name__}",
        )
    return document


def encode_body(answer: Mapping[str, Any]) -> bytes:
    """An action's answer as the JSON body."""
    return json.dumps(answer, separators=(",", ":")).encode()


# -- parameters -----------------------------------------------------------------------


def required(params: Mapping[str, Any], name: str) -> Any:
    """Parameter ``name``; MissingParameter when absent."""
    value = params.get(name)
    if value is None:
        raise SqsError("MissingParameter", f"The request must contain the parameter {name}.")
    return value


def text(params: Mapping[str, Any], name: str, *, optional: bool = False) -> str | None:
    """A string parameter (required unless ``optional``)."""
    value = params.get(name) if optional else required(params, name)
    if value is not None and not isinstance(value, str):
        raise invalid(f"Value {value!r} for parameter {name} is invalid. Reason: must be a string.")
    return value


def integer(params: Mapping[str, Any], name: str, low: int, high: int) -> int | None:
    """An optional whole-number parameter within ``[low, high]``."""
    value = params.get(name)
    if value is None:
        return None
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)  # the query protocol's habit, which some clients keep
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise invalid(
            f"Value {value!r} for parameter {name} is invalid. Reason: must be between"
            f" {low} and {high}."
        )
    return value


def string_list(params: Mapping[str, Any], name: str) -> list[str]:
    """An optional list of strings (empty when absent)."""
    value = params.get(name)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise invalid(
            f"Value {value!r} for parameter {name} is invalid. Reason: must be a list of strings."
        )
    return value


def string_map(params: Mapping[str, Any], name: str) -> dict[str, str]:
    """An optional map of string to string (empty when absent)."""
    value = params.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise invalid(
            f"Value for parameter {name} is invalid. Reason: must map strings to strings."
        )
    return value
