"""`bdq serve` (the SQS-compatible HTTP service) and `bdq access-key` (its keys)."""

from __future__ import annotations

from pathlib import Path

import click

from spark_queue.cli.flags import (
    CommandGroup,
    connection_options,
    echo_json,
    echo_progress,
    json_option,
)
from spark_queue.config import ConnectionSettings
from spark_queue.errors import InvalidSetting
from spark_queue.service.accounts import AccessKeys, server_cipher
from spark_queue.store.session import Store


@click.command(name="serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port", type=click.IntRange(1, 65535), default=9324, show_default=True,
    help="Port to listen on.",
)  # fmt: skip
@click.option(
    "--workers", type=click.IntRange(1, 64), default=1, show_default=True,
    help="Server processes sharing the port; each is a stateless front end.",
)  # fmt: skip
@click.option(
    "--tls-cert", type=click.Path(dir_okay=False, path_type=Path), default=None,
    help="Serve HTTPS with this PEM certificate (the chain after it); needs --tls-key."
    " Not --tls-cert-file, the CQL side's client certificate.",
)  # fmt: skip
@click.option(
    "--tls-key", type=click.Path(dir_okay=False, path_type=Path), default=None,
    help="The PEM private key of --tls-cert (unencrypted). Not --tls-key-file (CQL).",
)  # fmt: skip
@connection_options
def serve(
    settings: ConnectionSettings,
    host: str,
    port: int,
    workers: int,
    tls_cert: Path | None,
    tls_key: Path | None,
) -> None:
    """Serve the keyspace's queues over SQS's HTTP protocol until Ctrl-C.

    Any AWS SDK or the AWS CLI is a client: point its endpoint URL at the printed
    address and sign with a key of `bdq access-key create`. Each key sees only its
    account's queues. With --tls-cert and --tls-key it serves HTTPS. Needs the
    'serve' extra: pip install 'spark-queue[serve]'.
    """
    from spark_queue.service.server import TlsFiles
    from spark_queue.service.server import serve as run

    # Fail here in one line (a missing extra, bad TLS files, a bad server key, a
    # missing table, an unreachable cluster), not in a traceback of the server's startup.
    tls = None
    if (tls_cert is None) != (tls_key is None):
        given, missing = (
            ("--tls-cert", "--tls-key") if tls_key is None else ("--tls-key", "--tls-cert")
        )
        raise InvalidSetting(
            f"{given} {str(tls_cert or tls_key)!r}: needs {missing} too (HTTPS takes the"
            " certificate and its private key)"
        )
    if tls_cert is not None and tls_key is not None:
        tls = TlsFiles(tls_cert, tls_key)
        tls.check()
    cipher = server_cipher()
    store = Store(settings)
    try:
        AccessKeys(store, cipher)
    finally:
        store.close()
    shown = f"[{host}]" if ":" in host else host
    scheme = "http" if tls is None else "https"
    echo_progress(
        f"serving SQS (AWS JSON 1.0 and query) on {scheme}://{shown}:{port} for keyspace"
        f" {settings.keyspace!r}; Ctrl-C stops"
    )
    run(settings, host, port, workers, tls)


@click.group(name="access-key", cls=CommandGroup)
def access_key() -> None:
    """Access keys of `bdq serve`: each signs requests for one account's queues.

    Secrets are stored encrypted with the server key (BDQ_SERVE_KEY, else the file
    BDQ_SERVE_KEY_FILE, else ~/.bdq/serve.key, made on first use); every server of
    the keyspace needs the same server key.
    """


@access_key.command(name="create")
@click.argument("account")
@json_option
@connection_options
def create(settings: ConnectionSettings, account: str, as_json: bool) -> None:
    """Make a key for ACCOUNT and print its id and secret: the secret is shown only now."""
    store = Store(settings)
    try:
        key = AccessKeys(store).create(account)
    finally:
        store.close()
    if as_json:
        echo_json({"access_key_id": key.access_key_id, "secret_access_key": key.secret_access_key})
        return
    click.echo(f"access key id:     {key.access_key_id}")
    click.echo(f"secret access key: {key.secret_access_key}")
    click.echo(f"account:           {key.account}")
    echo_progress("the secret is shown only this once: keep it now")


@access_key.command(name="list")
@json_option
@connection_options
def list_command(settings: ConnectionSettings, as_json: bool) -> None:
    """List the keys (ids, accounts, creation times; never secrets)."""
    store = Store(settings)
    try:
        keys = AccessKeys(store).list()
    finally:
        store.close()
    if as_json:
        echo_json(
            [
                {"access_key_id": k.access_key_id, "account": k.account, "created_at": k.created_at}
                for k in keys
            ]
        )
        return
    for k in keys:
        created = "" if k.created_at is None else k.created_at.strftime("%Y-%m-%d %H:%M:%S")
        click.echo(f"{k.access_key_id}  {k.account}  {created}")


@access_key.command(name="revoke")
@click.argument("key_id")
@connection_options
def revoke(settings: ConnectionSettings, key_id: str) -> None:
    """Delete a key: servers refuse it within 10 seconds."""
    store = Store(settings)
    try:
        removed = AccessKeys(store).revoke(key_id)
    finally:
        store.close()
    if not removed:
        raise InvalidSetting(f"access key {key_id!r}: there is none of that id")
    echo_progress(f"revoked {key_id}")
