"""The query protocol's form decoder and XML encoder, without a server."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from spark_queue.service.protocol import SqsError
from spark_queue.service.query_protocol import decode_form, encode_answer, error_body


def test_flattened_lists_maps_and_entries_decode_to_the_json_parameters() -> None:
    form = (
        b"Action=SendMessageBatch&Version=2012-11-05"
        b"&SendMessageBatchRequestEntry.2.Id=b&SendMessageBatchRequestEntry.2.MessageBody=two"
        b"&SendMessageBatchRequestEntry.1.Id=a&SendMessageBatchRequestEntry.1.MessageBody=one"
        b"&SendMessageBatchRequestEntry.1.MessageAttribute.1.Name=n"
        b"&SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.DataType=Number"
        b"&SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.StringValue=1"
    )

    action, params = decode_form(form, "http://h/acme/q")

    assert action == "SendMessageBatch"
    assert params == {
        "QueueUrl": "http://h/acme/q",
        "Entries": [
            {
                "Id": "a",
                "MessageBody": "one",
                "MessageAttributes": {"n": {"DataType": "Number", "StringValue": "1"}},
            },
            {"Id": "b", "MessageBody": "two"},
        ],
    }


def test_create_queue_names_its_tags_as_the_json_model_does() -> None:
    form = b"Action=CreateQueue&QueueName=q&Tag.1.Key=team&Tag.1.Value=x&AttributeName.1=All"

    _, params = decode_form(form, None)

    assert params == {"QueueName": "q", "tags": {"team": "x"}, "AttributeNames": ["All"]}


@pytest.mark.parametrize(
    ("form", "shape", "named"),
    [
        (b"QueueName=q", "InvalidAction", "Action"),
        (b"Action=ListQueues&Version=2008-01-01", "InvalidParameterValue", "2008-01-01"),
        (b"Action=ReceiveMessage&AttributeName.0=All", "InvalidParameterValue", "AttributeName"),
        (b"Action=CreateQueue&Attribute.1.Name=DelaySeconds", "InvalidParameterValue", "Value"),
        (
            b"Action=ListQueues&QueueNamePrefix=a&QueueNamePrefix=b",
            "InvalidParameterValue",
            "twice",
        ),
        (b"Action=ListQueues&broken", "InvalidParameterValue", "form"),
    ],
)
def test_a_malformed_form_is_refused_naming_what_is_wrong(
    form: bytes, shape: str, named: str
) -> None:
    with pytest.raises(SqsError) as caught:
        decode_form(form, None)

    assert caught.value.shape == shape
    assert named in caught.value.message


def test_answers_are_written_in_sqs_xml_shapes() -> None:
    answer = {
        "Messages": [
            {
                "Body": "a\r\nb <&>",
                "Attributes": {"ApproximateReceiveCount": "1"},
                "MessageAttributes": {"n": {"DataType": "String", "StringValue": "v"}},
            }
        ]
    }

    root = ET.fromstring(encode_answer("ReceiveMessage", answer, "rid"))
    empty = ET.fromstring(encode_answer("DeleteMessage", {}, "rid"))
    failed = ET.fromstring(
        encode_answer("DeleteMessageBatch", {"Successful": [{"Id": "a"}], "Failed": []}, "rid")
    )

    ns = "{http://queue.amazonaws.com/doc/2012-11-05/}"
    message = root.find(f"{ns}ReceiveMessageResult/{ns}Message")
    assert message is not None
    assert message.findtext(f"{ns}Body") == "a\r\nb <&>"
    assert message.findtext(f"{ns}Attribute/{ns}Name") == "ApproximateReceiveCount"
    assert message.findtext(f"{ns}MessageAttribute/{ns}Value/{ns}StringValue") == "v"
    assert root.findtext(f"{ns}ResponseMetadata/{ns}RequestId") == "rid"
    assert [e.tag for e in empty] == [f"{ns}ResponseMetadata"]
    assert failed.findtext(f"{ns}DeleteMessageBatchResult/{ns}DeleteMessageBatchResultEntry/{ns}Id")
    assert error_body(SqsError("QueueDoesNotExist", "no <q>"), "rid").decode() == (
        '<ErrorResponse xmlns="http://queue.amazonaws.com/doc/2012-11-05/"><Error>'
        "<Type>Sender</Type><Code>AWS.SimpleQueueService.NonExistentQueue</Code>"
        "<Message>no &lt;q&gt;</Message><Detail/></Error><RequestId>rid</RequestId>"
        "</ErrorResponse>"
    )
