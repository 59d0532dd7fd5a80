"""Accounts and their access keys: made, listed, revoked, and looked up to check a signature.

An account is a name that owns queues; a key belongs to one account. The secret
is shown once, when the key is made, and stored encrypted (Fernet: AES-128-CBC and
HMAC-SHA256, from ``cryptography``) with the *server key*, which lives outside
Cassandra: ``BDQ_SERVE_KEY`` (the key itself), else the file ``BDQ_SERVE_KEY_FILE``,
else ``~/.bdq/serve.key``, made on first use with mode 0600. A reader of the table
therefore cannot sign requests; every ``bdq serve`` of a keyspace, and whoever
runs ``bdq access-key create``, needs the same server key.
"""

from __future__ import annotations

import os
import re
import secrets
import string
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from spark_queue.errors import InvalidSetting, MissingExtra, SparkQueueError
from spark_queue.store import access_keys
from spark_queue.store.session import Store

if TYPE_CHECKING:
    from cryptography.fernet import Fernet

#: Environment variables of the server key: the key itself, or the file holding it.
KEY_ENV, KEY_FILE_ENV = "BDQ_SERVE_KEY", "BDQ_SERVE_KEY_FILE"
#: Seconds a looked-up key is used before it is read again: a revoked key stops
#: working within this time on every server.
KEY_CACHE_SECONDS = 10.0
_ACCOUNT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
_ID_ALPHABET = string.ascii_uppercase + string.digits


def check_account(name: object) -> str:
    """Return ``name`` if it is a valid account name."""
    if not isinstance(name, str) or not _ACCOUNT.fullmatch(name):
        raise InvalidSetting(
            f"account {name!r}: must be 1-64 letters, digits, '_' or '-', starting with a"
            " letter or digit"
        )
    return name


@dataclass(frozen=True, slots=True)
class NewKey:
    """A key just made: the only time its secret is seen in clear (kept out of the repr)."""

    access_key_id: str
    account: str
    secret_access_key: str = field(repr=False)


@dataclass(frozen=True, slots=True)
class KeyInfo:
    """A key as listed: no secret."""

    access_key_id: str
    account: str
    created_at: datetime | None


def server_key_path() -> Path:
    """Where the server key file is: ``BDQ_SERVE_KEY_FILE``, else ``~/.bdq/serve.key``."""
    given = os.environ.get(KEY_FILE_ENV)
    return Path(given).expanduser() if given else Path.home() / ".bdq" / "serve.key"


def server_cipher(*, create: bool = True) -> Fernet:
    """The cipher of the server key (see the module docstring); made on first use if ``create``."""
    try:
        from cryptography.fernet import Fernet
    except ImportError as e:
        raise MissingExtra("the SQS service (bdq serve, bdq access-key)", "serve", e.name) from e
    text = os.environ.get(KEY_ENV)
    where = f"the variable {KEY_ENV}"
    if not text:
        path = server_key_path()
        where = str(path)
        if not path.exists():
            if not create:
                raise InvalidSetting(f"server key {path}: does not exist; set {KEY_ENV} or make it")
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(Fernet.generate_key())
        text = path.read_text().strip()
    try:
        return Fernet(text.encode())
    except ValueError as e:
        raise InvalidSetting(
            f"server key in {where}: must be 32 url-safe base64-encoded bytes (a Fernet key)"
        ) from e


class AccessKeys:
    """The keys of one keyspace; safe to share between threads.

    Args:
        store: The keyspace's store.
        cipher: The server key's cipher (default :func:`server_cipher`).
    """

    def __init__(self, store: Store, cipher: Fernet | None = None) -> None:
        self._store = store
        self._cipher = cipher or server_cipher()
        self._cache: dict[str, tuple[float, tuple[str, str] | None]] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"AccessKeys(keyspace={self._store.keyspace!r})"

    def create(self, account: str) -> NewKey:
        """Make a key for ``account`` and return it with its secret (shown this once)."""
        check_account(account)
        secret = secrets.token_urlsafe(30)  # 40 characters, as AWS's secrets are
        for _ in range(3):
            key_id = "BDQ" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(17))
            encrypted = self._cipher.encrypt(secret.encode())
            if access_keys.insert_key(self._store, key_id, account, encrypted):
                return NewKey(key_id, account, secret)
        raise SparkQueueError("could not draw an unused access key id in 3 tries")  # ~never

    def list(self) -> list[KeyInfo]:
        """Every key, by account then id, without secrets."""
        return [KeyInfo(*row) for row in access_keys.list_keys(self._store)]

    def revoke(self, access_key_id: str) -> bool:
        """Remove a key at once from the table; False when there was none of that id.

        Servers that looked it up lately keep it for up to ``KEY_CACHE_SECONDS``.
        """
        with self._lock:
            self._cache.pop(access_key_id, None)
        return access_keys.delete_key(self._store, access_key_id)

    def lookup(self, access_key_id: str) -> tuple[str, str] | None:
        """``(account, secret)`` of a key, or None for an unknown or revoked one.

        Kept for ``KEY_CACHE_SECONDS`` (absent keys too, so a flood of bad ids costs
        one read each per period).
        """
        now = time.monotonic()
        with self._lock:
            cached = self._cache.get(access_key_id)
        if cached is not None and cached[0] > now:
            return cached[1]
        stored = access_keys.read_key(self._store, access_key_id)
        found: tuple[str, str] | None = None
        if stored is not None:
            from cryptography.fernet import InvalidToken

            try:
                found = (stored.account, self._cipher.decrypt(stored.encrypted_secret).decode())
            except InvalidToken as e:
                raise SparkQueueError(
                    f"access key {access_key_id}: its secret was encrypted with another server"
                    f" key than this server's ({KEY_ENV} or {server_key_path()})"
                ) from e
        with self._lock:
            if len(self._cache) > 10_000:
                self._cache.clear()  # bounded: a flood of random ids must not grow it
            self._cache[access_key_id] = (now + KEY_CACHE_SECONDS, found)
        return found
