"""The driver's exceptions in spark-queue's words: every one a ``SparkQueueError``.

Each says what was being done, why it failed and the likely fix, and keeps the
driver's exception as its cause. A statement Cassandra refused for a missing
permission becomes ``PermissionDenied``, naming the role, the permission and
the table in one line.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Iterator
from contextlib import contextmanager

from cassandra import (
    DriverException,
    InvalidRequest,
    OperationTimedOut,
    ReadTimeout,
    Unauthorized,
    Unavailable,
    WriteTimeout,
)
from cassandra.cluster import NoHostAvailable
from cassandra.connection import ConnectionBusy
from cassandra.pool import NoConnectionsAvailable

from spark_queue.errors import BackendUnavailable, PermissionDenied, SparkQueueError

__all__ = [
    "never_sent",
    "no_host_message",
    "permission_denied",
    "translate_errors",
    "translated",
]

#: What the driver raises for a host before a request leaves the process: the
#: connection's socket buffer is full (the node reads requests slower than they
#: come), or every request id of the host's connections is in use.
_REFUSED_BEFORE_SENDING = (ConnectionBusy, NoConnectionsAvailable)

#: Cassandra's refusal: "User app has no MODIFY permission on <table ks.messages> or any
#: of its parents".
_REFUSAL = re.compile(
    r"User (?P<role>\S+) has no (?P<permission>\w+) permission on <(?P<resource>[^>]+)>"
)


@contextmanager
def translate_errors(what: str) -> Iterator[None]:
    """Turn driver exceptions into SparkQueueErrors that say what was being done."""
    try:
        yield
    except SparkQueueError:
        raise
    except (NoHostAvailable, DriverException) as e:
        raise translated(e, what) from e


def translated(error: BaseException, what: str) -> SparkQueueError:
    """The SparkQueueError for an exception the driver raised or handed to a callback.

    For errors that reach code through the driver's asynchronous callbacks,
    where ``translate_errors`` cannot wrap the call. The result keeps
    ``error`` as its cause; anything that is no driver error is wrapped too,
    so a caller always gets a SparkQueueError.
    """
    result: SparkQueueError
    if isinstance(error, SparkQueueError):
        return error
    if isinstance(error, NoHostAvailable):
        result = BackendUnavailable(f"{what}: {no_host_message(error)}")
    elif isinstance(error, OperationTimedOut | ReadTimeout | WriteTimeout):
        result = BackendUnavailable(f"{what}: Cassandra did not answer in time ({error})")
    elif isinstance(error, Unavailable):
        result = BackendUnavailable(
            f"{what}: not enough live replicas for the consistency level ({error})"
        )
    elif isinstance(error, Unauthorized):
        result = permission_denied(error, what)
    elif isinstance(error, InvalidRequest):
        result = SparkQueueError(f"{what}: Cassandra rejected the request: {error}")
    elif isinstance(error, DriverException):
        result = BackendUnavailable(f"{what}: {type(error).__name__}: {error}")
    else:
        result = SparkQueueError(f"{what}: {type(error).__name__}: {error}")
    result.__cause__ = error
    return result


def never_sent(error: BaseException) -> bool:
    """Whether the driver refused ``error``'s request on every host before sending it.

    Such a request never reached Cassandra, so sending it again cannot apply
    it twice, whatever it is (a conditional update too).
    """
    if not isinstance(error, NoHostAvailable) or not error.errors:
        return False
    return all(isinstance(e, _REFUSED_BEFORE_SENDING) for e in error.errors.values())


def permission_denied(error: Unauthorized, what: str) -> PermissionDenied:
    """One line naming the role, the permission it lacks, on what, and where the grants are."""
    text = str(getattr(error, "message", "") or error)
    found = _REFUSAL.search(text)
    if found is None:  # another wording (another Cassandra, a custom authorizer): keep it whole
        return PermissionDenied(
            f"{what}: Cassandra refused it ({text}); ask an operator for the permission"
            " (`bdq keyspace grant --help` lists what each kind of role needs)"
        )
    role, permission, resource = found["role"], found["permission"], found["resource"]
    kind, _, name = resource.partition(" ")
    keyspace = name.split(".", 1)[0] if kind in ("table", "keyspace") else None
    grant = f"bdq keyspace grant {role} --monitor|--producer|--consumer|--operator"
    if keyspace:
        grant += f" --keyspace {keyspace}"
    return PermissionDenied(
        f"{what}: role {role!r} has no {permission} permission on {resource}; an operator"
        f" grants what its part needs with `{grant}` (--print shows the statements)",
        permission=permission,
        resource=resource,
        role=role,
    )


def no_host_message(error: NoHostAvailable) -> str:
    """Why no host answered, naming the first host and its cause, with the likely fix."""
    errors = getattr(error, "errors", None) or {}
    if not errors:
        return f"no host answered ({error})"
    host, cause = next(iter(errors.items()))
    text = f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__
    # The driver may wrap the ssl module's error in another OSError: go by its text too.
    if isinstance(cause, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in text:
        detail = getattr(cause, "verify_message", None) or str(cause).split("] ")[-1]
        return (
            f"TLS: the certificate of {host} was not accepted ({detail}); check"
            " tls_ca_file (the CA that signed the node's certificate) and that the certificate"
            " names the address you connect to (tls_check_hostname)"
        )
    if isinstance(cause, ssl.SSLError) or "[SSL" in text:
        reason = getattr(cause, "reason", None) or text
        return (
            f"TLS handshake with {host} failed ({reason}); does the node speak TLS on this"
            " port, and does it accept the client certificate?"
        )
    if never_sent(error):
        return (
            f"the driver's connection to {host} stayed overloaded ({text}): Cassandra took"
            " requests more slowly than they were sent; send fewer or smaller requests at"
            " once, or give the node more CPU"
        )
    hint = (
        "start a local node with 'bdq cassandra start' or point BDQ_CASSANDRA_HOSTS at your cluster"
    )
    if "AuthenticationFailed" in text or "Bad credentials" in text:
        hint = "check the username and password (or auth_provider)"
    elif "Connection" in type(cause).__name__ or "closed" in text.lower():
        hint += "; if the cluster requires TLS, turn tls on"
    return f"no host answered ({host}: {text}); {hint}"
