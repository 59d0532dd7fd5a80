"""Connection settings, parsed and checked once, from one precedence order.

Explicit arguments (client keywords, CLI flags, Spark options) win over the
``BDQ_*`` environment, which wins over the defaults below. Every value is
checked here, so a bad one fails before anything touches Cassandra.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from spark_queue import defaults
from spark_queue.errors import InvalidSetting

DEFAULT_PORT = 9042
DEFAULT_HOSTS = ("127.0.0.1:9042",)
DEFAULT_KEYSPACE = "bdq"

#: Environment variable behind each connection setting.
ENV_VARS = {
    "hosts": "BDQ_CASSANDRA_HOSTS",
    "keyspace": "BDQ_KEYSPACE",
    "username": "BDQ_CASSANDRA_USERNAME",
    "password": "BDQ_CASSANDRA_PASSWORD",
    "local_dc": "BDQ_LOCAL_DC",
    "consistency": "BDQ_CONSISTENCY",
    "auth_provider": "BDQ_CASSANDRA_AUTH_PROVIDER",
    "protocol_version": "BDQ_CASSANDRA_PROTOCOL_VERSION",
    "tls": "BDQ_CASSANDRA_TLS",
    "tls_ca_file": "BDQ_CASSANDRA_TLS_CA_FILE",
    "tls_cert_file": "BDQ_CASSANDRA_TLS_CERT_FILE",
    "tls_key_file": "BDQ_CASSANDRA_TLS_KEY_FILE",
    "tls_check_hostname": "BDQ_CASSANDRA_TLS_CHECK_HOSTNAME",
}

#: Native protocol versions a user may pin (None negotiates the highest the cluster speaks).
PROTOCOL_VERSIONS = (3, 4, 5)
_BOOL_FIELDS = ("tls", "tls_check_hostname")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")

CONSISTENCY_LEVELS = (
    "ONE",
    "TWO",
    "THREE",
    "QUORUM",
    "ALL",
    "LOCAL_QUORUM",
    "EACH_QUORUM",
    "LOCAL_ONE",
)
SERIAL_CONSISTENCY_LEVELS = ("SERIAL", "LOCAL_SERIAL")

_KEYSPACE_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,47}")
_HOST_RE = re.compile(
    r"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<name>[A-Za-z0-9_.\-]+))(?::(?P<port>\d+))?"
)


@dataclass(frozen=True)
class HostPort:
    """One contact point."""

    host: str
    port: int = DEFAULT_PORT

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_host(text: str) -> HostPort:
    """Parse ``host``, ``host:port`` or ``[v6addr]:port``."""
    match = _HOST_RE.fullmatch(text.strip())
    if not match:
        raise InvalidSetting(
            f"host {text!r}: must be host or host:port, such as '127.0.0.1:9042' or '[::1]:9042'"
        )
    port = int(match["port"]) if match["port"] else DEFAULT_PORT
    if not 0 < port < 65536:
        raise InvalidSetting(f"host {text!r}: port {port} must be between 1 and 65535")
    return HostPort(match["v6"] or match["name"], port)


def parse_hosts(value: str | Iterable[str]) -> tuple[HostPort, ...]:
    """Parse a comma list (or an iterable) of ``host[:port]`` contact points."""
    items = value.split(",") if isinstance(value, str) else list(value)
    hosts = tuple(parse_host(item) for item in items if item.strip())
    if not hosts:
        raise InvalidSetting(
            f"hosts {value!r}: must name at least one host, such as '127.0.0.1:9042'"
        )
    return hosts


def check_keyspace(name: str) -> str:
    """Return ``name`` if it is a valid unquoted Cassandra keyspace name."""
    if not isinstance(name, str) or not _KEYSPACE_RE.fullmatch(name):
        raise InvalidSetting(
            f"keyspace {name!r}: must start with a letter and hold only letters, digits and"
            " '_' (48 characters at most)"
        )
    return name


def parse_bool(setting: str, value: object) -> bool:
    """A bool, or text: 'true', 'false', '1', '0', 'yes', 'no', 'on' or 'off'."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise InvalidSetting(f"{setting} {value!r}: must be true or false")


def _coerce(name: str, value: Any) -> Any:
    """A setting given as text (environment, flags, Spark options) as its field's type."""
    if name == "hosts":
        return parse_hosts(value)
    if name in _BOOL_FIELDS:
        return parse_bool(name, value)
    if name == "protocol_version" and isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            raise InvalidSetting(
                f"protocol_version {value!r}: must be one of"
                f" {', '.join(map(str, PROTOCOL_VERSIONS))}, or unset to negotiate"
            ) from None
    return value


def check_choice(setting: str, value: str, allowed: Iterable[str]) -> str:
    """Upper-case ``value`` and check it is one of ``allowed``."""
    allowed = tuple(allowed)
    normalized = str(value).strip().upper()
    if normalized not in allowed:
        raise InvalidSetting(f"{setting} {value!r}: must be one of {', '.join(allowed)}")
    return normalized


@dataclass(frozen=True, kw_only=True)
class ConnectionSettings:
    """Where the queue lives and how to talk to it.

    Attributes:
        hosts: Contact points. Default ``127.0.0.1:9042`` (the local node).
        keyspace: Keyspace holding the queue tables. Default ``bdq``.
        local_dc: Data center for the load-balancing policy; None lets the
            driver pick the first contact point's.
        username: Plain-text auth user, or None.
        password: Plain-text auth password, or None. Never shown in ``repr``.
        auth_provider: ``module.Class`` of a driver auth provider to use instead
            of the plain-text one (such as
            ``cassandra.auth.SaslAuthProvider``); it is called with
            ``username=`` and ``password=`` when those are set, else with nothing.
        protocol_version: Native protocol version to pin (3, 4 or 5); None
            negotiates the highest one the cluster speaks.
        tls: Encrypt connections with TLS. None (the default) turns it on
            when any ``tls_*_file`` is given.
        tls_ca_file: PEM bundle of the CAs that sign the nodes' certificates;
            None trusts the system's CAs.
        tls_cert_file: PEM client certificate (mutual TLS), with ``tls_key_file``.
        tls_key_file: PEM private key of the client certificate (unencrypted).
        tls_check_hostname: Check that a node's certificate names the address
            it was reached at. On by default; turn off only for certificates
            without the nodes' names, knowing it allows man-in-the-middle attacks.
        consistency: Read/write consistency. Default ``LOCAL_QUORUM``.
        serial_consistency: Consistency of lightweight transactions.
            Default ``LOCAL_SERIAL``.
        replication_factor: Replicas of the keyspaces that the local node
            (``bdq cassandra start``), the benchmarks' own keyspaces and the tests
            create (SimpleStrategy, or NetworkTopologyStrategy in ``local_dc`` when
            set). Nothing else creates keyspaces: ``bdq keyspace create`` and
            ``QueueClient.create_keyspace`` take the replication they are given.
        connect_timeout: Seconds to wait for a connection.
        request_timeout: Seconds to wait for one statement.
    """

    hosts: tuple[HostPort, ...] = field(default_factory=lambda: parse_hosts(DEFAULT_HOSTS))
    keyspace: str = DEFAULT_KEYSPACE
    local_dc: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    auth_provider: str | None = None
    protocol_version: int | None = None
    tls: bool | None = None
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_check_hostname: bool = True
    consistency: str = "LOCAL_QUORUM"
    serial_consistency: str = "LOCAL_SERIAL"
    replication_factor: int = 1
    connect_timeout: float = 10.0
    request_timeout: float = 20.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "hosts", parse_hosts([str(h) for h in self.hosts]))
        check_keyspace(self.keyspace)
        object.__setattr__(
            self, "consistency", check_choice("consistency", self.consistency, CONSISTENCY_LEVELS)
        )
        object.__setattr__(
            self,
            "serial_consistency",
            check_choice("serial consistency", self.serial_consistency, SERIAL_CONSISTENCY_LEVELS),
        )
        if (self.username is None) != (self.password is None):
            raise InvalidSetting(
                "username and password: give both or neither"
                f" (username {'set' if self.username else 'missing'},"
                f" password {'set' if self.password else 'missing'})"
            )
        if self.auth_provider is not None and not re.fullmatch(
            r"[A-Za-z_][\w.]*\.[A-Za-z_]\w*", str(self.auth_provider)
        ):
            raise InvalidSetting(
                f"auth_provider {self.auth_provider!r}: must be 'module.Class' of a driver auth"
                " provider, such as 'cassandra.auth.SaslAuthProvider'"
            )
        if self.protocol_version is not None and self.protocol_version not in PROTOCOL_VERSIONS:
            raise InvalidSetting(
                f"protocol_version {self.protocol_version!r}: must be one of"
                f" {', '.join(map(str, PROTOCOL_VERSIONS))}, or unset to negotiate"
            )
        self._check_tls()
        if not isinstance(self.replication_factor, int) or self.replication_factor < 1:
            raise InvalidSetting(
                f"replication factor {self.replication_factor!r}: must be a whole number >= 1"
            )
        for name in ("connect_timeout", "request_timeout"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or value <= 0:
                raise InvalidSetting(f"{name} {value!r}: must be a positive number of seconds")

    def _check_tls(self) -> None:
        files = {
            "tls_ca_file": self.tls_ca_file,
            "tls_cert_file": self.tls_cert_file,
            "tls_key_file": self.tls_key_file,
        }
        given = [name for name, path in files.items() if path is not None]
        if self.tls is None:
            object.__setattr__(self, "tls", bool(given))
        elif not isinstance(self.tls, bool):
            object.__setattr__(self, "tls", parse_bool("tls", self.tls))
        if not isinstance(self.tls_check_hostname, bool):
            object.__setattr__(
                self,
                "tls_check_hostname",
                parse_bool("tls_check_hostname", self.tls_check_hostname),
            )
        if given and not self.tls:
            raise InvalidSetting(
                f"tls false with {given[0]} {files[given[0]]!r}: turn TLS on or drop the TLS files"
            )
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise InvalidSetting(
                "tls_cert_file and tls_key_file: give both (mutual TLS) or neither"
                f" (tls_cert_file {'set' if self.tls_cert_file else 'missing'},"
                f" tls_key_file {'set' if self.tls_key_file else 'missing'})"
            )
        for name in given:
            if not os.path.isfile(str(files[name])):
                raise InvalidSetting(f"{name} {files[name]!r}: no such file")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> ConnectionSettings:
        """Build settings from ``BDQ_*`` variables; keyword arguments that are not None win.

        Args:
            env: The environment to read (default ``os.environ``).
            **overrides: Any field of this class; None means "not given".
        """
        env = os.environ if env is None else env
        known = {f.name for f in fields(cls)}
        unknown = set(overrides) - known
        if unknown:
            raise InvalidSetting(
                f"connection setting {sorted(unknown)[0]!r}: unknown; known are {sorted(known)}"
            )
        values: dict[str, Any] = {}
        for name, var in ENV_VARS.items():
            if env.get(var):
                values[name] = _coerce(name, env[var])
        for name, value in overrides.items():
            if value is not None:
                values[name] = _coerce(name, value)
        return cls(**values)

    def with_keyspace(self, keyspace: str) -> ConnectionSettings:
        """A copy pointing at another keyspace."""
        return replace(self, keyspace=keyspace)


def hosts_from_env(env: Mapping[str, str] | None = None) -> tuple[HostPort, ...] | None:
    """The user's own cluster from ``BDQ_CASSANDRA_HOSTS``, or None when unset."""
    env = os.environ if env is None else env
    value = env.get(ENV_VARS["hosts"], "").strip()
    return parse_hosts(value) if value else None


# -- queue settings ------------------------------------------------------------

_QUEUE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,199}")


def check_queue_name(name: object) -> str:
    """Return ``name`` if it is a valid queue name."""
    if not isinstance(name, str) or not _QUEUE_NAME_RE.fullmatch(name):
        raise InvalidSetting(
            f"queue name {name!r}: must be 1-200 characters of letters, digits, '_', '.' or '-',"
            " starting with a letter or digit"
        )
    return name


def check_seconds(setting: str, value: object, *, allow_zero: bool = False) -> float:
    """Return ``value`` as float seconds if it is a finite positive (or zero) number."""
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    seconds = float(value) if ok else float("nan")  # type: ignore[arg-type]
    if (
        not ok
        or seconds != seconds
        or seconds == float("inf")
        or seconds < 0
        or (seconds == 0 and not allow_zero)
    ):
        rule = "a number of seconds >= 0" if allow_zero else "a positive number of seconds"
        raise InvalidSetting(f"{setting} {value!r}: must be {rule}")
    return seconds


#: Seconds per duration unit; a number without a unit is seconds.
DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
#: How every duration is written: flags, connector options, TOML files.
DURATION_RULE = (
    "a number of seconds, or a number with a unit ms, s, m, h or d,"
    " such as 30, '500ms', '30s', '2m' or '1h'"
)
_DURATION_RE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([a-z]+)?")


def parse_duration(
    setting: str, value: object, *, allow_zero: bool = False, whole: bool = False
) -> float:
    """Seconds from a duration written the one way spark-queue accepts everywhere.

    A number (``30``, ``0.5``: seconds), or text: a number with an optional
    unit, ``ms``, ``s``, ``m`` (or ``min``), ``h`` or ``d`` (``'500ms'``,
    ``'30s'``, ``'2m'``, ``'1h'``, ``'7d'``). CLI flags, Spark connector options
    and TOML files all go through this function.

    Args:
        setting: How the caller names the value in an error (``--visibility-timeout``,
            ``option 'visibilityTimeout' =``).
        value: A number or text.
        allow_zero: Accept 0.
        whole: Accept only whole seconds (a TTL).

    Raises:
        InvalidSetting: Naming ``setting``, the value and the rule.
    """
    seconds = float("nan")
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        match = _DURATION_RE.fullmatch(value.strip().lower())
        if match and (match[2] is None or match[2] in DURATION_UNITS):
            seconds = float(match[1]) * (DURATION_UNITS[match[2]] if match[2] else 1.0)
    finite = seconds == seconds and seconds != float("inf")
    if not finite or seconds < 0 or (seconds == 0 and not allow_zero):
        kind = "duration of 0 or more" if allow_zero else "positive duration"
        raise InvalidSetting(f"{setting} {value!r}: must be a {kind}: {DURATION_RULE}")
    if whole and seconds != int(seconds):
        raise InvalidSetting(f"{setting} {value!r}: must be whole seconds, such as 60 or '7d'")
    return seconds


def check_int(setting: str, value: object, low: int, high: int) -> int:
    """Return ``value`` if it is a whole number in ``[low, high]``."""
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidSetting(f"{setting} {value!r}: must be a whole number from {low} to {high}")
    return value


@dataclass(frozen=True, kw_only=True)
class QueueSettings:
    """A queue's settings, fixed at creation.

    Attributes:
        bucket_size: Ids per bucket (one Cassandra partition). Default 1000.
        visibility_timeout: Seconds a received message stays invisible. Default 30.
        order_hint: BlueDove's K: a receive picks among the oldest K visible
            messages per message asked for. 1 keeps the order; racing
            consumers get no duplicates at any K (a message comes back only when
            its lease runs out), and a larger K only makes their conditional
            leases collide less often. Default 1.
        message_ttl: Seconds a message lives unacked before it expires. Default 7 days.
        max_deliveries: Deliveries after which a message moves to
            ``dead_letter_queue`` instead of being delivered again; None for no limit.
        dead_letter_queue: Name of the queue receiving such messages.
        max_message_bytes: Largest message accepted: payload, header names and values,
            and key, as UTF-8 bytes. Default 256 KiB; up to 16 MiB here, and
            ``create_queue`` and ``update_queue`` also bound it by what one write of
            the cluster holds (``store/write_limits.py``).
        seal_delay: Seconds a bucket stays open for delayed writes after its last
            id was handed out (CassieQ's repair wait). Writes slower than this
            are checked and re-sent if their bucket was sealed. Default 5.
        lanes: Units of order (``lanes.py``): a keyed message's lane is the
            crc32 of its key modulo ``lanes``, and each lane is received by one
            consumer at a time, in id order. Keyless messages take no lane in a
            queue of several (any number of consumers share them, ``shares.py``);
            with one lane the whole queue is one unit of order. Fixed at
            creation. Default 8.
    """

    bucket_size: int = defaults.BUCKET_SIZE
    visibility_timeout: float = defaults.VISIBILITY_TIMEOUT
    order_hint: int = defaults.ORDER_HINT
    message_ttl: int = defaults.MESSAGE_TTL
    max_deliveries: int | None = None
    dead_letter_queue: str | None = None
    max_message_bytes: int = defaults.MAX_MESSAGE_BYTES
    seal_delay: float = defaults.SEAL_DELAY
    lanes: int = defaults.LANES

    def __post_init__(self) -> None:
        check_int("bucket_size", self.bucket_size, 1, defaults.MAX_BUCKET_SIZE)
        object.__setattr__(
            self, "visibility_timeout", check_seconds("visibility_timeout", self.visibility_timeout)
        )
        check_int("order_hint", self.order_hint, 1, defaults.MAX_ORDER_HINT)
        check_int("message_ttl", self.message_ttl, 1, defaults.MAX_TTL)
        if self.max_deliveries is not None:
            check_int("max_deliveries", self.max_deliveries, 1, 1_000_000)
            if self.dead_letter_queue is None:
                raise InvalidSetting(
                    f"max_deliveries {self.max_deliveries}: needs dead_letter_queue, the queue"
                    " that takes messages delivered that many times (nothing is dropped silently)"
                )
        if self.dead_letter_queue is not None:
            check_queue_name(self.dead_letter_queue)
            if self.max_deliveries is None:
                raise InvalidSetting(
                    f"dead_letter_queue {self.dead_letter_queue!r}: needs max_deliveries,"
                    " the number of deliveries after which a message moves there"
                )
        check_int("max_message_bytes", self.max_message_bytes, 1, defaults.MAX_MESSAGE_BYTES_LIMIT)
        object.__setattr__(self, "seal_delay", check_seconds("seal_delay", self.seal_delay))
        if self.lanes is None:
            # A queue created before lanes existed: its rows have no lane, and
            # one lane is read without a lane filter, so it sees them all.
            object.__setattr__(self, "lanes", 1)
        check_int("lanes", self.lanes, 1, defaults.MAX_LANES)
