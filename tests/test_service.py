"""``bdq serve`` against the real node, driven by boto3: one server process for the module.

The SDK signs every request (SigV4) and parses every answer and error, so each
test checks the wire format as well as the behaviour.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from spark_queue.client import QueueClient
from spark_queue.config import ConnectionSettings
from spark_queue.service.accounts import NewKey
from spark_queue.service.message_attributes import md5_of_attributes, parse_attributes
from tests.service_server import Server, running_server

pytestmark = pytest.mark.cassandra


@pytest.fixture(scope="module")
def server(_module_keyspace: ConnectionSettings) -> Iterator[Server]:
    with running_server(_module_keyspace) as running:
        yield running


def _sqs(server: Server, key: NewKey, region: str = "us-east-1") -> Any:
    return boto3.client(
        "sqs",
        endpoint_url=server.url,
        region_name=region,
        aws_access_key_id=key.access_key_id,
        aws_secret_access_key=key.secret_access_key,
        config=Config(retries={"max_attempts": 1}),
    )


@pytest.fixture
def sqs(server: Server) -> Any:
    return _sqs(server, server.acme)


def _code(caught: pytest.ExceptionInfo[ClientError]) -> str:
    return str(caught.value.response["Error"]["Code"])


def _bdq_messages(server: Server, name: str) -> int:
    with QueueClient(settings=server.settings) as client:
        return client.queue(name).stats(exact=True).total


# -- queues ---------------------------------------------------------------------------


def test_queue_create_get_list_and_delete(server: Server, sqs: Any) -> None:
    url = sqs.create_queue(QueueName="crud-a")["QueueUrl"]
    sqs.create_queue(QueueName="crud-b")
    sqs.create_queue(QueueName="other")

    assert url == f"{server.url}/acme/crud-a"
    assert sqs.create_queue(QueueName="crud-a")["QueueUrl"] == url  # idempotent
    assert sqs.get_queue_url(QueueName="crud-a")["QueueUrl"] == url
    assert sqs.list_queues(QueueNamePrefix="crud-")["QueueUrls"] == [url, url[:-1] + "b"]
    first = sqs.list_queues(QueueNamePrefix="crud-", MaxResults=1)
    assert first["QueueUrls"] == [url]
    second = sqs.list_queues(QueueNamePrefix="crud-", MaxResults=1, NextToken=first["NextToken"])
    assert second["QueueUrls"] == [url[:-1] + "b"]
    assert "NextToken" not in second

    sqs.delete_queue(QueueUrl=url)

    with pytest.raises(sqs.exceptions.QueueDoesNotExist) as caught:
        sqs.get_queue_url(QueueName="crud-a")
    assert _code(caught) == "AWS.SimpleQueueService.NonExistentQueue"
    with QueueClient(settings=server.settings) as client:  # the bdq name: account.queue
        assert {"acme.crud-b", "acme.other"} <= set(client.list_queues())


def test_create_with_other_attributes_is_refused(sqs: Any) -> None:
    sqs.create_queue(QueueName="attrs-clash", Attributes={"VisibilityTimeout": "40"})

    with pytest.raises(sqs.exceptions.QueueNameExists) as caught:
        sqs.create_queue(QueueName="attrs-clash", Attributes={"VisibilityTimeout": "41"})

    assert _code(caught) == "QueueAlreadyExists"


def test_queue_attributes_map_onto_settings_and_back(server: Server, sqs: Any) -> None:
    url = sqs.create_queue(
        QueueName="attrs",
        Attributes={
            "VisibilityTimeout": "45",
            "DelaySeconds": "2",
            "MessageRetentionPeriod": "600",
        },
    )["QueueUrl"]

    sqs.set_queue_attributes(
        QueueUrl=url,
        Attributes={"ReceiveMessageWaitTimeSeconds": "3", "MaximumMessageSize": "2048"},
    )
    found = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]

    assert found["VisibilityTimeout"] == "45"
    assert found["DelaySeconds"] == "2"
    assert found["MessageRetentionPeriod"] == "600"
    assert found["ReceiveMessageWaitTimeSeconds"] == "3"
    assert found["MaximumMessageSize"] == "2048"
    assert found["QueueArn"] == "arn:aws:sqs:us-east-1:acme:attrs"
    assert found["ApproximateNumberOfMessages"] == "0"
    assert int(found["LastModifiedTimestamp"]) >= int(found["CreatedTimestamp"]) > 0
    with QueueClient(settings=server.settings) as client:
        settings = client.queue("acme.attrs").settings
    assert (settings.visibility_timeout, settings.message_ttl) == (45.0, 600)
    assert settings.max_message_bytes == 2048


def test_bad_attributes_get_sqs_errors_and_change_nothing(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="attrs-bad")["QueueUrl"]

    with pytest.raises(ClientError) as unknown:
        sqs.set_queue_attributes(QueueUrl=url, Attributes={"Colour": "1"})
    with pytest.raises(ClientError) as too_long:
        sqs.set_queue_attributes(
            QueueUrl=url, Attributes={"VisibilityTimeout": "60", "DelaySeconds": "901"}
        )

    assert _code(unknown) == "InvalidAttributeName"
    assert _code(too_long) == "InvalidAttributeValue"
    found = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["VisibilityTimeout"])
    assert found["Attributes"] == {"VisibilityTimeout": "30"}


# -- messages ---------------------------------------------------------------------------


def test_send_receive_delete_with_typed_attributes(server: Server, sqs: Any) -> None:
    url = sqs.create_queue(QueueName="messages")["QueueUrl"]
    attributes = {
        "colour": {"DataType": "String", "StringValue": "blue"},
        "price": {"DataType": "Number.money", "StringValue": "12.50"},
        "blob": {"DataType": "Binary", "BinaryValue": b"\x00\xff"},
    }
    body = "hello, queue ✓"

    sent = sqs.send_message(QueueUrl=url, MessageBody=body, MessageAttributes=attributes)
    got = sqs.receive_message(
        QueueUrl=url,
        MaxNumberOfMessages=10,
        MessageAttributeNames=["All"],
        MessageSystemAttributeNames=["All"],
    )["Messages"]

    as_json = {
        "colour": {"DataType": "String", "StringValue": "blue"},
        "price": {"DataType": "Number.money", "StringValue": "12.50"},
        "blob": {"DataType": "Binary", "BinaryValue": base64.b64encode(b"\x00\xff").decode()},
    }
    expected_md5 = md5_of_attributes(parse_attributes(as_json))
    assert sent["MD5OfMessageBody"] == hashlib.md5(body.encode()).hexdigest()
    assert sent["MD5OfMessageAttributes"] == expected_md5
    [message] = got
    assert message["MessageId"] == sent["MessageId"]
    assert message["Body"] == body
    assert message["MD5OfBody"] == sent["MD5OfMessageBody"]
    assert message["MessageAttributes"] == attributes
    assert message["MD5OfMessageAttributes"] == expected_md5
    assert message["Attributes"]["ApproximateReceiveCount"] == "1"
    assert message["Attributes"]["SenderId"] == "acme"

    sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])

    assert _bdq_messages(server, "acme.messages") == 0
    with pytest.raises(sqs.exceptions.ReceiptHandleIsInvalid):  # deleted: stale now
        sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])


def test_attribute_names_choose_what_comes_back(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="choose")["QueueUrl"]
    sqs.send_message(
        QueueUrl=url,
        MessageBody="m",
        MessageAttributes={
            n: {"DataType": "String", "StringValue": n} for n in ("foo.a", "foo.b", "bar")
        },
    )

    [message] = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["foo.*"])["Messages"]

    assert sorted(message["MessageAttributes"]) == ["foo.a", "foo.b"]
    assert message["MD5OfMessageAttributes"] == md5_of_attributes(
        parse_attributes({n: {"DataType": "String", "StringValue": n} for n in ("foo.a", "foo.b")})
    )
    assert "Attributes" not in message


def test_batches_answer_per_entry(server: Server, sqs: Any) -> None:
    url = sqs.create_queue(QueueName="batches")["QueueUrl"]

    sent = sqs.send_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "ok1", "MessageBody": "one"},
            {"Id": "bad", "MessageBody": "two", "DelaySeconds": 901},
            {"Id": "ok2", "MessageBody": "three"},
        ],
    )
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    receipts = [m["ReceiptHandle"] for m in got]
    changed = sqs.change_message_visibility_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "a", "ReceiptHandle": receipts[0], "VisibilityTimeout": 60},
            {"Id": "b", "ReceiptHandle": "garbage", "VisibilityTimeout": 60},
        ],
    )
    deleted = sqs.delete_message_batch(
        QueueUrl=url,
        Entries=[{"Id": "x", "ReceiptHandle": receipts[1]}, {"Id": "y", "ReceiptHandle": "nope"}],
    )

    assert sorted(e["Id"] for e in sent["Successful"]) == ["ok1", "ok2"]
    assert [(f["Id"], f["SenderFault"]) for f in sent["Failed"]] == [("bad", True)]
    assert sorted(m["Body"] for m in got) == ["one", "three"]
    assert [e["Id"] for e in changed["Successful"]] == ["a"]
    assert [(f["Id"], f["Code"]) for f in changed["Failed"]] == [("b", "ReceiptHandleIsInvalid")]
    assert [e["Id"] for e in deleted["Successful"]] == ["x"]
    assert [(f["Id"], f["Code"]) for f in deleted["Failed"]] == [("y", "ReceiptHandleIsInvalid")]
    assert _bdq_messages(server, "acme.batches") == 1


def test_a_batch_of_eleven_and_repeated_ids_are_refused_whole(server: Server, sqs: Any) -> None:
    url = sqs.create_queue(QueueName="eleven")["QueueUrl"]

    with pytest.raises(sqs.exceptions.TooManyEntriesInBatchRequest) as eleven:
        sqs.send_message_batch(
            QueueUrl=url, Entries=[{"Id": f"m{i}", "MessageBody": "x"} for i in range(11)]
        )
    with pytest.raises(sqs.exceptions.BatchEntryIdsNotDistinct):
        sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": "same", "MessageBody": "x"}] * 2)
    with pytest.raises(sqs.exceptions.EmptyBatchRequest):
        sqs.send_message_batch(QueueUrl=url, Entries=[])

    assert _code(eleven) == "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"
    assert _bdq_messages(server, "acme.eleven") == 0


def test_bad_messages_are_refused_and_write_nothing(server: Server, sqs: Any) -> None:
    url = sqs.create_queue(QueueName="refusals", Attributes={"MaximumMessageSize": "1024"})[
        "QueueUrl"
    ]

    with pytest.raises(ClientError) as too_big:
        sqs.send_message(QueueUrl=url, MessageBody="x" * 1025)
    with pytest.raises(ClientError) as bad_chars:
        sqs.send_message(QueueUrl=url, MessageBody="nul \x00 inside")
    with pytest.raises(ClientError) as delay:
        sqs.send_message(QueueUrl=url, MessageBody="x", DelaySeconds=901)
    with pytest.raises(ClientError) as wait:
        sqs.receive_message(QueueUrl=url, WaitTimeSeconds=21)

    assert _code(too_big) == "InvalidParameterValue"
    assert _code(bad_chars) == "InvalidMessageContents"
    assert _code(delay) == "InvalidParameterValue"
    assert _code(wait) == "InvalidParameterValue"
    assert _bdq_messages(server, "acme.refusals") == 0


def test_change_visibility_makes_a_message_visible_again(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="visibility")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="again")
    [first] = sqs.receive_message(QueueUrl=url, VisibilityTimeout=600)["Messages"]

    assert "Messages" not in sqs.receive_message(QueueUrl=url)
    sqs.change_message_visibility(
        QueueUrl=url, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=0
    )
    [second] = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5)["Messages"]

    assert second["MessageId"] == first["MessageId"]
    assert second["ReceiptHandle"] != first["ReceiptHandle"]
    with pytest.raises(sqs.exceptions.MessageNotInflight):  # received again: that one is over
        sqs.change_message_visibility(
            QueueUrl=url, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=5
        )
    with pytest.raises(sqs.exceptions.ReceiptHandleIsInvalid):
        sqs.delete_message(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"])


def test_a_handle_still_deletes_after_its_visibility_was_changed(server: Server, sqs: Any) -> None:
    # Given a worker that extends its lease twice while it works, as on SQS
    url = sqs.create_queue(QueueName="heartbeat")["QueueUrl"]
    sqs.send_message_batch(
        QueueUrl=url, Entries=[{"Id": "a", "MessageBody": "a"}, {"Id": "b", "MessageBody": "b"}]
    )
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=30)
    handles = [m["ReceiptHandle"] for m in got["Messages"]]
    assert len(handles) == 2
    for seconds in (60, 120):
        sqs.change_message_visibility(
            QueueUrl=url, ReceiptHandle=handles[0], VisibilityTimeout=seconds
        )
    changed = sqs.change_message_visibility_batch(
        QueueUrl=url, Entries=[{"Id": "b", "ReceiptHandle": handles[1], "VisibilityTimeout": 90}]
    )
    assert [e["Id"] for e in changed["Successful"]] == ["b"]

    # When it deletes with the handles of its receive
    sqs.delete_message(QueueUrl=url, ReceiptHandle=handles[0])
    deleted = sqs.delete_message_batch(
        QueueUrl=url, Entries=[{"Id": "b", "ReceiptHandle": handles[1]}]
    )

    # Then both messages are gone
    assert [e["Id"] for e in deleted["Successful"]] == ["b"]
    assert _bdq_messages(server, "acme.heartbeat") == 0


def test_purge_removes_every_message(server: Server, sqs: Any) -> None:
    url = sqs.create_queue(QueueName="purged")["QueueUrl"]
    sqs.send_message_batch(
        QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": "x"} for i in range(5)]
    )

    sqs.purge_queue(QueueUrl=url)

    assert _bdq_messages(server, "acme.purged") == 0


def test_a_long_poll_wakes_up_when_a_message_arrives(server: Server, sqs: Any) -> None:
    url = sqs.create_queue(QueueName="long-poll")["QueueUrl"]
    answers: list[dict[str, Any]] = []
    waiting = threading.Thread(
        target=lambda: answers.append(
            _sqs(server, server.acme).receive_message(QueueUrl=url, WaitTimeSeconds=20)
        )
    )
    waiting.start()

    # Delayed, so the receive finds nothing at first and must keep waiting for it.
    sqs.send_message(QueueUrl=url, MessageBody="wake up", DelaySeconds=2)
    waiting.join()

    assert [m["Body"] for m in answers[0]["Messages"]] == ["wake up"]


# -- accounts and the wire ------------------------------------------------------------------


def test_an_account_sees_and_touches_only_its_own_queues(server: Server, sqs: Any) -> None:
    url = sqs.create_queue(QueueName="private")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="acme's")
    globex = _sqs(server, server.globex, region="eu-west-1")

    other_url = globex.create_queue(QueueName="private")["QueueUrl"]

    assert other_url == f"{server.url}/globex/private"
    assert "Messages" not in globex.receive_message(QueueUrl=other_url)
    assert all("/globex/" in u for u in globex.list_queues().get("QueueUrls", []))
    for call in (
        lambda: globex.receive_message(QueueUrl=url),
        lambda: globex.send_message(QueueUrl=url, MessageBody="intruder"),
        lambda: globex.purge_queue(QueueUrl=url),
        lambda: globex.get_queue_url(QueueName="private", QueueOwnerAWSAccountId="acme"),
    ):
        with pytest.raises(globex.exceptions.QueueDoesNotExist):
            call()
    assert _bdq_messages(server, "acme.private") == 1


def test_a_bad_signature_and_an_unknown_key_are_refused(server: Server) -> None:
    wrong = NewKey(server.acme.access_key_id, "acme", "not-the-secret")
    unknown = NewKey("BDQUNKNOWNKEY0000000", "acme", server.acme.secret_access_key)

    with pytest.raises(ClientError) as bad_signature:
        _sqs(server, wrong).list_queues()
    with pytest.raises(ClientError) as bad_key:
        _sqs(server, unknown).list_queues()

    assert _code(bad_signature) == "SignatureDoesNotMatch"
    assert bad_signature.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert _code(bad_key) == "InvalidClientTokenId"


def _raw(server: Server, target: str, body: bytes) -> tuple[int, dict[str, str], dict[str, Any]]:
    """A request signed by botocore but written by hand (malformed bodies, odd targets)."""
    request = AWSRequest(
        method="POST",
        url=server.url + "/",
        data=body,
        headers={"X-Amz-Target": target, "Content-Type": "application/x-amz-json-1.0"},
    )
    credentials = Credentials(server.acme.access_key_id, server.acme.secret_access_key)
    SigV4Auth(credentials, "sqs", "us-east-1").add_auth(request)
    prepared = urllib.request.Request(
        server.url + "/", data=body, headers=dict(request.headers.items()), method="POST"
    )
    try:
        with urllib.request.urlopen(prepared) as answer:
            return answer.status, dict(answer.headers.items()), json.loads(answer.read())
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers.items()), json.loads(e.read())


def test_malformed_json_and_an_unknown_action_get_sqs_errors(server: Server) -> None:
    status, headers, body = _raw(server, "AmazonSQS.ListQueues", b"{not json")
    assert status == 400
    assert body["__type"] == "com.amazonaws.sqs#SerializationException"
    assert headers["x-amzn-query-error"] == "SerializationException;Sender"

    status, headers, body = _raw(server, "AmazonSQS.FlyToTheMoon", b"{}")
    assert status == 400
    assert body["__type"] == "com.amazonaws.sqs#UnknownOperationException"
    assert headers["x-amzn-query-error"] == "InvalidAction;Sender"


def test_missing_parameters_are_named(server: Server) -> None:
    status, headers, body = _raw(server, "AmazonSQS.SendMessage", b"{}")

    assert status == 400
    assert headers["x-amzn-query-error"] == "MissingParameter;Sender"
    assert "QueueUrl" in body["message"]


# -- the query protocol ----------------------------------------------------------------
# No installed botocore model speaks it any more (SQS's lists only "json"), so these
# requests are written by hand, signed by botocore's SigV4Auth, and their XML read here.


def _query(
    server: Server, form: dict[str, str], path: str = "/", key: NewKey | None = None
) -> tuple[int, ET.Element]:
    """POST a query-protocol form, signed with ``key`` (acme's by default); status and XML."""
    key = key or server.acme
    body = urllib.parse.urlencode({"Version": "2012-11-05", **form}).encode()
    url = server.url + path
    request = AWSRequest(
        method="POST",
        url=url,
        data=body,
        headers={"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"},
    )
    SigV4Auth(Credentials(key.access_key_id, key.secret_access_key), "sqs", "us-east-1").add_auth(
        request
    )
    prepared = urllib.request.Request(
        url, data=body, headers=dict(request.headers.items()), method="POST"
    )
    try:
        with urllib.request.urlopen(prepared) as answer:
            return answer.status, ET.fromstring(answer.read())
    except urllib.error.HTTPError as e:
        return e.code, ET.fromstring(e.read())


def _find(element: ET.Element, path: str) -> str:
    """The text at ``path``, namespaces ignored (``{*}``), "" when empty."""
    found = element.find("/".join(f"{{*}}{part}" for part in path.split("/")))
    assert found is not None, f"no {path} in {ET.tostring(element)!r}"
    return found.text or ""


def _all(element: ET.Element, path: str) -> list[ET.Element]:
    return element.findall("/".join(p if p == "*" else f"{{*}}{p}" for p in path.split("/")))


def test_the_query_protocol_sends_receives_and_deletes(server: Server, sqs: Any) -> None:
    # Given a queue, and the MD5 of attributes that boto3 checked on a JSON send
    url = sqs.create_queue(QueueName="query-a")["QueueUrl"]
    path = url.removeprefix(server.url)
    body = "line one\r\nline two & <three> ✓"
    attributes = {
        "colour": {"DataType": "String", "StringValue": "blue"},
        "price": {"DataType": "Number", "StringValue": "12.50"},
        "blob": {"DataType": "Binary", "BinaryValue": b"\x00\xff"},
    }
    checked = sqs.send_message(QueueUrl=url, MessageBody=body, MessageAttributes=attributes)
    [first] = sqs.receive_message(QueueUrl=url)["Messages"]
    sqs.delete_message(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"])
    form = {
        "MessageAttribute.1.Name": "colour",
        "MessageAttribute.1.Value.DataType": "String",
        "MessageAttribute.1.Value.StringValue": "blue",
        "MessageAttribute.2.Name": "price",
        "MessageAttribute.2.Value.DataType": "Number",
        "MessageAttribute.2.Value.StringValue": "12.50",
        "MessageAttribute.3.Name": "blob",
        "MessageAttribute.3.Value.DataType": "Binary",
        "MessageAttribute.3.Value.BinaryValue": base64.b64encode(b"\x00\xff").decode(),
    }

    # When it is sent through the query protocol to the queue's URL, received and deleted
    status, sent = _query(server, {"Action": "SendMessage", "MessageBody": body, **form}, path)
    status_received, received = _query(
        server,
        {
            "Action": "ReceiveMessage",
            "QueueUrl": url,
            "MaxNumberOfMessages": "10",
            "AttributeName.1": "All",
            "MessageAttributeName.1": "All",
        },
    )
    [message] = _all(received, "ReceiveMessageResult/Message")
    handle = _find(message, "ReceiptHandle")
    status_deleted, deleted = _query(
        server, {"Action": "DeleteMessage", "QueueUrl": url, "ReceiptHandle": handle}
    )

    # Then the answers have SQS's shapes and the MD5s an SDK checks
    assert (status, status_received, status_deleted) == (200, 200, 200)
    assert sent.tag.endswith("SendMessageResponse")
    assert _find(sent, "SendMessageResult/MD5OfMessageBody") == checked["MD5OfMessageBody"]
    assert (
        _find(sent, "SendMessageResult/MD5OfMessageAttributes")
        == (checked["MD5OfMessageAttributes"])
    )
    assert _find(sent, "ResponseMetadata/RequestId")
    assert _find(message, "Body") == body  # the carriage return survives the XML
    assert _find(message, "MessageId") == _find(sent, "SendMessageResult/MessageId")
    assert _find(message, "MD5OfBody") == checked["MD5OfMessageBody"]
    assert _find(message, "MD5OfMessageAttributes") == checked["MD5OfMessageAttributes"]
    system = {_find(a, "Name"): _find(a, "Value") for a in _all(message, "Attribute")}
    assert system["ApproximateReceiveCount"] == "1"
    assert system["SenderId"] == "acme"
    kept = {
        _find(a, "Name"): {v.tag.split("}")[-1]: v.text for v in _all(a, "Value/*")}
        for a in _all(message, "MessageAttribute")
    }
    assert kept == {
        "colour": {"DataType": "String", "StringValue": "blue"},
        "price": {"DataType": "Number", "StringValue": "12.50"},
        "blob": {"DataType": "Binary", "BinaryValue": base64.b64encode(b"\x00\xff").decode()},
    }
    assert deleted.tag.endswith("DeleteMessageResponse")
    assert not _all(deleted, "DeleteMessageResult")
    assert _bdq_messages(server, "acme.query-a") == 0


def test_the_query_protocol_answers_batches_per_entry(server: Server, sqs: Any) -> None:
    url = sqs.create_queue(QueueName="query-batch")["QueueUrl"]

    _, sent = _query(
        server,
        {
            "Action": "SendMessageBatch",
            "QueueUrl": url,
            "SendMessageBatchRequestEntry.1.Id": "ok",
            "SendMessageBatchRequestEntry.1.MessageBody": "one",
            "SendMessageBatchRequestEntry.2.Id": "late",
            "SendMessageBatchRequestEntry.2.MessageBody": "two",
            "SendMessageBatchRequestEntry.2.DelaySeconds": "901",
        },
    )
    handles = [m["ReceiptHandle"] for m in sqs.receive_message(QueueUrl=url)["Messages"]]
    _, deleted = _query(
        server,
        {
            "Action": "DeleteMessageBatch",
            "QueueUrl": url,
            "DeleteMessageBatchRequestEntry.1.Id": "a",
            "DeleteMessageBatchRequestEntry.1.ReceiptHandle": handles[0],
            "DeleteMessageBatchRequestEntry.2.Id": "b",
            "DeleteMessageBatchRequestEntry.2.ReceiptHandle": "nope",
        },
    )

    [ok] = _all(sent, "SendMessageBatchResult/SendMessageBatchResultEntry")
    [late] = _all(sent, "SendMessageBatchResult/BatchResultErrorEntry")
    assert _find(ok, "Id") == "ok"
    assert _find(ok, "MD5OfMessageBody") == hashlib.md5(b"one").hexdigest()
    assert (_find(late, "Id"), _find(late, "SenderFault")) == ("late", "true")
    assert _find(late, "Code") == "InvalidParameterValue"
    [done] = _all(deleted, "DeleteMessageBatchResult/DeleteMessageBatchResultEntry")
    [failed] = _all(deleted, "DeleteMessageBatchResult/BatchResultErrorEntry")
    assert _find(done, "Id") == "a"
    assert (_find(failed, "Id"), _find(failed, "Code")) == ("b", "ReceiptHandleIsInvalid")
    assert _bdq_messages(server, "acme.query-batch") == 0


def test_the_query_protocol_answers_lists_and_maps(server: Server, sqs: Any) -> None:
    _, created = _query(
        server,
        {
            "Action": "CreateQueue",
            "QueueName": "query-maps",
            "Attribute.1.Name": "VisibilityTimeout",
            "Attribute.1.Value": "45",
            "Tag.1.Key": "team",
            "Tag.1.Value": "orders",
        },
    )
    url = _find(created, "CreateQueueResult/QueueUrl")

    _, attributes = _query(
        server, {"Action": "GetQueueAttributes", "QueueUrl": url, "AttributeName.1": "All"}
    )
    _, listed = _query(server, {"Action": "ListQueues", "QueueNamePrefix": "query-m"})

    found = {
        _find(a, "Name"): _find(a, "Value")
        for a in _all(attributes, "GetQueueAttributesResult/Attribute")
    }
    assert found["VisibilityTimeout"] == "45"
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "orders"}
    assert [q.text for q in _all(listed, "ListQueuesResult/QueueUrl")] == [url]


def test_the_query_protocol_answers_xml_errors_and_writes_nothing(server: Server, sqs: Any) -> None:
    url = sqs.create_queue(QueueName="query-errors")["QueueUrl"]
    eleven = {"Action": "SendMessageBatch", "QueueUrl": url}
    for i in range(1, 12):
        eleven[f"SendMessageBatchRequestEntry.{i}.Id"] = f"m{i}"
        eleven[f"SendMessageBatchRequestEntry.{i}.MessageBody"] = "x"
    wrong = NewKey(server.acme.access_key_id, "acme", "not-the-secret")

    answers = [
        _query(server, {"Action": "GetQueueUrl", "QueueName": "no-such-queue"}),
        _query(server, eleven),
        _query(server, {"Action": "SendMessage", "QueueUrl": url}),
        _query(server, {"Action": "FlyToTheMoon"}),
        _query(server, {"Action": "SendMessage", "QueueUrl": url, "MessageBody": "x"}, key=wrong),
    ]

    codes = [(status, _find(e, "Error/Type"), _find(e, "Error/Code")) for status, e in answers]
    assert codes == [
        (400, "Sender", "AWS.SimpleQueueService.NonExistentQueue"),
        (400, "Sender", "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"),
        (400, "Sender", "MissingParameter"),
        (400, "Sender", "InvalidAction"),
        (403, "Sender", "SignatureDoesNotMatch"),
    ]
    assert all(e.tag.endswith("ErrorResponse") and _find(e, "RequestId") for _, e in answers)
    assert "MessageBody" in _find(answers[2][1], "Error/Message")
    assert _bdq_messages(server, "acme.query-errors") == 0
