"""AWS Signature Version 4, checked on the server side: the signature and the time skew.

The client signs with its secret key (AWS's published algorithm): a canonical form
of the request (method, path, query, the headers it names, the SHA-256 of the
body), hashed into a string to sign, signed with a key derived from the secret,
the date, the region and the service. This module recomputes that signature from
the stored secret and compares it in constant time. Only the ``Authorization``
header form is accepted (no presigned query strings).
"""

from __future__ import annotations

import hashlib
import hmac
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qsl, quote

from spark_queue.service.protocol import SqsError

ALGORITHM = "AWS4-HMAC-SHA256"
SERVICE = "sqs"
#: How far the client's clock may be from the server's (SQS's own limit).
MAX_SKEW = timedelta(minutes=5)
_AMZ_DATE = "%Y%m%dT%H%M%SZ"
_FIELD = re.compile(r"\s*(Credential|SignedHeaders|Signature)\s*=\s*([^,\s]*)\s*")


@dataclass(frozen=True, slots=True)
class Authorization:
    """What an ``Authorization`` header claims (the signature itself is not in the repr)."""

    access_key_id: str
    date: str  # YYYYMMDD of the credential scope
    region: str
    signed_headers: tuple[str, ...]
    signature: str = field(repr=False)

    @property
    def scope(self) -> str:
        """The credential scope: ``date/region/sqs/aws4_request``."""
        return f"{self.date}/{self.region}/{SERVICE}/aws4_request"


def parse_authorization(header: str | None) -> Authorization:
    """Read an ``Authorization`` header; SQS's error when it is missing or malformed."""
    if not header:
        raise SqsError(
            "MissingAuthenticationToken",
            "Request is missing Authentication Token: sign it with AWS Signature Version 4",
        )
    algorithm, _, rest = header.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise SqsError(
            "IncompleteSignature",
            f"Authorization algorithm {algorithm!r}: only {ALGORITHM} is accepted",
        )
    fields: dict[str, str] = {}
    for part in rest.split(","):
        match = _FIELD.fullmatch(part)
        if match:
            fields[match.group(1)] = match.group(2)
    missing = [f for f in ("Credential", "SignedHeaders", "Signature") if not fields.get(f)]
    if missing:
        raise SqsError("IncompleteSignature", f"Authorization header lacks {', '.join(missing)}")
    parts = fields["Credential"].split("/")
    if len(parts) != 5 or parts[3] != SERVICE or parts[4] != "aws4_request":
        raise SqsError(
            "IncompleteSignature",
            f"Credential scope {'/'.join(parts[1:])!r}: must be <date>/<region>/sqs/aws4_request",
        )
    signed = tuple(fields["SignedHeaders"].split(";"))
    if "host" not in signed:
        raise SqsError("IncompleteSignature", "SignedHeaders must include host")
    return Authorization(parts[0], parts[1], parts[2], signed, fields["Signature"])


def request_time(headers: Mapping[str, str], now: datetime) -> str:
    """The request's ``X-Amz-Date``, checked against ``now`` within ``MAX_SKEW``."""
    stamp = headers.get("x-amz-date")
    if not stamp:
        raise SqsError("IncompleteSignature", "the request lacks the X-Amz-Date header")
    try:
        when = datetime.strptime(stamp, _AMZ_DATE).replace(tzinfo=UTC)
    except ValueError as e:
        raise SqsError(
            "IncompleteSignature", f"X-Amz-Date {stamp!r}: must be like 20260101T120000Z"
        ) from e
    if abs(now - when) > MAX_SKEW:
        raise SqsError(
            "SignatureDoesNotMatch",
            f"Signature expired: {stamp} is more than 5 minutes from the server's time"
            f" {now.strftime(_AMZ_DATE)}; check the client's clock",
        )
    return stamp


def canonical_request(
    method: str,
    raw_path: str,
    query: str,
    headers: Sequence[tuple[str, str]],
    signed_headers: Sequence[str],
    body: bytes,
) -> str:
    """The canonical request of SigV4, from the request as it arrived.

    Args:
        method: The HTTP method.
        raw_path: The path as sent (still percent-encoded).
        query: The raw query string.
        headers: Every header as ``(lower-case name, value)``, repeats included.
        signed_headers: The names the client signed, in its order.
        body: The body as received: its hash is recomputed, never taken from a header.
    """
    path = posixpath.normpath(raw_path or "/")
    if raw_path.endswith("/") and path != "/":
        path += "/"
    path = "/" + path.lstrip("/")  # normpath keeps a leading "//"
    pairs = sorted(
        (quote(k, safe="-_.~"), quote(v, safe="-_.~"))
        for k, v in parse_qsl(query, keep_blank_values=True)
    )
    values: dict[str, list[str]] = {}
    for name, value in headers:
        values.setdefault(name.lower(), []).append(" ".join(value.split()))
    lines = "".join(f"{n}:{','.join(values.get(n, []))}\n" for n in signed_headers)
    return "\n".join(
        (
            method.upper(),
            quote(path, safe="/~"),
            "&".join(f"{k}={v}" for k, v in pairs),
            lines,
            ";".join(signed_headers),
            hashlib.sha256(body).hexdigest(),
        )
    )


def signature(secret: str, auth: Authorization, amz_date: str, canonical: str) -> str:
    """The hex signature of ``canonical`` under ``secret`` for ``auth``'s scope."""
    to_sign = "\n".join(
        (ALGORITHM, amz_date, auth.scope, hashlib.sha256(canonical.encode()).hexdigest())
    )
    key = ("AWS4" + secret).encode()
    for part in (auth.date, auth.region, SERVICE, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()


def verify(
    auth: Authorization,
    secret: str,
    method: str,
    raw_path: str,
    query: str,
    headers: Sequence[tuple[str, str]],
    body: bytes,
    now: datetime | None = None,
) -> None:
    """Check a request's signature and time; SignatureDoesNotMatch unless both hold.

    Args:
        auth: The parsed ``Authorization`` header.
        secret: The secret key of ``auth.access_key_id``.
        method: As in :func:`canonical_request`.
        raw_path: As in :func:`canonical_request`.
        query: As in :func:`canonical_request`.
        headers: As in :func:`canonical_request`.
        body: As in :func:`canonical_request`.
        now: The server's time (UTC); default the clock's.
    """
    by_name = {name.lower(): value for name, value in headers}
    amz_date = request_time(by_name, now or datetime.now(UTC))
    if not amz_date.startswith(auth.date):
        raise SqsError(
            "SignatureDoesNotMatch",
            f"Credential date {auth.date} is not the date of X-Amz-Date {amz_date}",
        )
    canonical = canonical_request(method, raw_path, query, headers, auth.signed_headers, body)
    expected = signature(secret, auth, amz_date, canonical)
    if not hmac.compare_digest(expected, auth.signature):
        raise SqsError(
            "SignatureDoesNotMatch",
            "The request signature we calculated does not match the signature you provided."
            " Check your AWS Secret Access Key and signing method.",
        )
