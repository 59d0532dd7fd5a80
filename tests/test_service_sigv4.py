"""SigV4 verification of ``bdq serve`` (service/sigv4.py): requests signed by botocore's signer.

Fast tests: botocore's own ``SigV4Auth`` signs on the client side, exactly as boto3
and the AWS CLI do, and the service's code checks the result.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from spark_queue.service import sigv4
from spark_queue.service.protocol import SqsError

KEY_ID, SECRET = "BDQTESTKEY0000000001", "s3cr3t-s3cr3t-s3cr3t-s3cr3t-s3cr3t-s3cr3"
URL = "http://127.0.0.1:9324/"


def _signed(body: bytes, *, secret: str = SECRET, region: str = "eu-west-3") -> AWSRequest:
    request = AWSRequest(
        method="POST",
        url=URL,
        data=body,
        headers={
            "X-Amz-Target": "AmazonSQS.ListQueues",
            "Content-Type": "application/x-amz-json-1.0",
        },
    )
    SigV4Auth(Credentials(KEY_ID, secret), "sqs", region).add_auth(request)
    request.headers["Host"] = "127.0.0.1:9324"  # what the server receives
    return request


def _verify(request: AWSRequest, body: bytes, now: datetime | None = None) -> None:
    auth = sigv4.parse_authorization(request.headers["Authorization"])
    headers = [(k.lower(), v) for k, v in request.headers.items()]
    sigv4.verify(auth, SECRET, "POST", "/", "", headers, body, now)


def test_a_request_signed_by_botocore_is_accepted_in_any_region() -> None:
    body = json.dumps({"QueueNamePrefix": "orders"}).encode()
    for region in ("eu-west-3", "us-east-1", "elsewhere"):
        request = _signed(body, region=region)

        auth = sigv4.parse_authorization(request.headers["Authorization"])
        _verify(request, body)  # no error

        assert (auth.access_key_id, auth.region) == (KEY_ID, region)


def test_a_tampered_body_is_refused() -> None:
    request = _signed(b'{"QueueNamePrefix": "orders"}')

    with pytest.raises(SqsError) as caught:
        _verify(request, b'{"QueueNamePrefix": "other"}')

    assert caught.value.shape == "SignatureDoesNotMatch"
    assert caught.value.status == 403


def test_a_tampered_signed_header_is_refused() -> None:
    body = b"{}"
    request = _signed(body)
    request.headers.replace_header("X-Amz-Target", "AmazonSQS.DeleteQueue")

    with pytest.raises(SqsError) as caught:
        _verify(request, body)

    assert caught.value.shape == "SignatureDoesNotMatch"


def test_another_secret_is_refused() -> None:
    body = b"{}"
    request = _signed(body, secret="not-the-secret")

    with pytest.raises(SqsError) as caught:
        _verify(request, body)

    assert caught.value.shape == "SignatureDoesNotMatch"


def test_a_clock_more_than_five_minutes_off_is_refused_and_within_accepted() -> None:
    body = b"{}"
    request = _signed(body)
    signed_at = datetime.strptime(request.headers["X-Amz-Date"], "%Y%m%dT%H%M%SZ").replace(
        tzinfo=UTC
    )

    _verify(request, body, signed_at + timedelta(minutes=4, seconds=59))
    with pytest.raises(SqsError) as caught:
        _verify(request, body, signed_at + timedelta(minutes=5, seconds=1))

    assert caught.value.shape == "SignatureDoesNotMatch"
    assert "expired" in caught.value.message


@pytest.mark.parametrize(
    ("header", "shape"),
    [
        (None, "MissingAuthenticationToken"),
        ("AWS4-HMAC-SHA1 Credential=x", "IncompleteSignature"),
        ("AWS4-HMAC-SHA256 Credential=K/20260101/r/sqs/aws4_request", "IncompleteSignature"),
        (
            "AWS4-HMAC-SHA256 Credential=K/20260101/r/s3/aws4_request, SignedHeaders=host,"
            " Signature=ab",
            "IncompleteSignature",
        ),
    ],
)
def test_a_missing_or_malformed_authorization_gets_its_error(
    header: str | None, shape: str
) -> None:
    with pytest.raises(SqsError) as caught:
        sigv4.parse_authorization(header)

    assert caught.value.shape == shape


def test_the_signature_stays_out_of_the_repr() -> None:
    request = _signed(b"{}")

    auth = sigv4.parse_authorization(request.headers["Authorization"])

    assert auth.signature not in repr(auth)
