"""Connection settings: TLS, auth provider and protocol from keywords, variables and options."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import trustme

from spark_queue.config import ConnectionSettings, parse_duration
from spark_queue.errors import InvalidSetting
from spark_queue.spark.options import SourceOptions, connection_settings, connector_options
from spark_queue.spark.options import parse_duration as parse_option_duration
from spark_queue.store.session import _auth_provider, _ssl_context

SECRET = "s3cret-Pa55"


@pytest.fixture
def pem(tmp_path: Path) -> Path:
    """A folder with a CA (ca.pem) and a client certificate it signed (client.pem, client.key)."""
    ca = trustme.CA()
    client = ca.issue_cert("bdq-client.example")
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    client.cert_chain_pems[0].write_to_path(str(tmp_path / "client.pem"))
    client.private_key_pem.write_to_path(str(tmp_path / "client.key"))
    return tmp_path


def test_defaults_negotiate_the_protocol_without_tls() -> None:
    settings = ConnectionSettings()

    assert settings.protocol_version is None
    assert settings.tls is False
    assert settings.tls_check_hostname is True
    assert _ssl_context(settings) is None


def test_variables_set_tls_and_protocol_and_keywords_win(pem: Path) -> None:
    env = {
        "BDQ_CASSANDRA_TLS_CA_FILE": str(pem / "ca.pem"),
        "BDQ_CASSANDRA_TLS_CHECK_HOSTNAME": "false",
        "BDQ_CASSANDRA_PROTOCOL_VERSION": "4",
    }

    settings = ConnectionSettings.from_env(env)
    pinned = ConnectionSettings.from_env(env, protocol_version="5", tls_check_hostname=True)

    assert settings.tls is True  # a CA file turns TLS on
    assert settings.tls_check_hostname is False
    assert settings.protocol_version == 4
    assert pinned.protocol_version == 5 and pinned.tls_check_hostname is True
    context = _ssl_context(settings)
    assert context is not None and context.check_hostname is False


def test_client_certificate_loads_into_the_context(pem: Path) -> None:
    settings = ConnectionSettings(
        tls_ca_file=str(pem / "ca.pem"),
        tls_cert_file=str(pem / "client.pem"),
        tls_key_file=str(pem / "client.key"),
    )

    context = _ssl_context(settings)

    assert context is not None and context.check_hostname is True


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"protocol_version": 6}, "protocol_version 6: must be one of 3, 4, 5"),
        ({"protocol_version": "v5"}, "protocol_version 'v5': must be one of 3, 4, 5"),
        ({"tls": "maybe"}, "tls 'maybe': must be true or false"),
        ({"tls_ca_file": "/no/such/ca.pem"}, "tls_ca_file '/no/such/ca.pem': no such file"),
        ({"tls_cert_file": "/x.pem"}, "tls_cert_file and tls_key_file: give both"),
        ({"tls": False, "tls_ca_file": "/x.pem"}, "tls false with tls_ca_file '/x.pem'"),
        ({"auth_provider": "not a class"}, "auth_provider 'not a class': must be 'module.Class'"),
    ],
)
def test_bad_settings_name_the_value_and_the_rule(given: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidSetting, match=message.replace("(", r"\(").replace(")", r"\)")):
        ConnectionSettings.from_env({}, **given)


def test_a_named_auth_provider_gets_the_credentials() -> None:
    settings = ConnectionSettings(
        username="u", password=SECRET, auth_provider="cassandra.auth.PlainTextAuthProvider"
    )
    provider = _auth_provider(settings)

    assert type(provider).__name__ == "PlainTextAuthProvider"
    assert provider is not None and provider.new_authenticator("h").password == SECRET  # type: ignore[attr-defined]


def test_an_auth_provider_that_does_not_import_is_named() -> None:
    settings = ConnectionSettings(auth_provider="no_such_module.Provider")

    with pytest.raises(InvalidSetting, match=r"auth_provider 'no_such_module.Provider': cannot"):
        _auth_provider(settings)


def test_the_password_stays_out_of_reprs_and_errors() -> None:
    settings = ConnectionSettings(username="u", password=SECRET)
    options = SourceOptions.parse({"queue": "q", "username": "u", "password": SECRET})

    assert SECRET not in repr(settings) and SECRET not in str(settings)
    assert SECRET not in repr(options)
    with pytest.raises(InvalidSetting) as caught:
        connection_settings({"password": SECRET})  # no username
    assert SECRET not in str(caught.value)


def test_connector_options_carry_every_setting_to_executors(pem: Path) -> None:
    settings = ConnectionSettings(
        protocol_version=4,
        tls_ca_file=str(pem / "ca.pem"),
        tls_cert_file=str(pem / "client.pem"),
        tls_key_file=str(pem / "client.key"),
        tls_check_hostname=False,
        auth_provider="cassandra.auth.PlainTextAuthProvider",
    )

    options = connector_options(settings)

    assert options["protocolVersion"] == "4"
    assert options["tls"] == "true" and options["tlsCheckHostname"] == "false"
    assert connection_settings({k.lower(): v for k, v in options.items()}) == settings


@pytest.mark.cassandra
def test_protocol_is_negotiated_by_default_and_pinned_on_request(
    cassandra: ConnectionSettings,
) -> None:
    from spark_queue.local import cql

    with cql.connect(cassandra) as negotiated:
        version = negotiated.execute("SELECT release_version FROM system.local").one()
        # Cassandra 4.0 and later speak v5, their highest; 3.x stops at v4
        highest = 5 if int(version.release_version.split(".")[0]) >= 4 else 4
        assert negotiated.cluster.protocol_version == highest
    with cql.connect(replace(cassandra, protocol_version=4)) as pinned:
        assert pinned.execute("SELECT release_version FROM system.local").one() == version
        assert pinned.cluster.protocol_version == 4


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(30, 30.0), (0.5, 0.5), ("30", 30.0), ("500ms", 0.5), ("30s", 30.0), (" 2m ", 120.0),
     ("1h", 3600.0), ("7d", 604800.0), (".5s", 0.5), ("1.5 min", 90.0)],
)  # fmt: skip
def test_a_duration_is_written_one_way_everywhere(value: object, seconds: float) -> None:
    assert parse_duration("--wait", value) == seconds
    # the connector options and the jobs' TOML go through the same parser
    assert parse_option_duration("visibilityTimeout", str(value)) == seconds


@pytest.mark.parametrize("value", [0, -5, "-5s", "5 parsecs", "1e3", "", "nan", float("inf"), True])
def test_a_bad_duration_names_the_value_and_the_rule(value: object) -> None:
    with pytest.raises(InvalidSetting) as e:
        parse_duration("--wait", value)
    assert str(e.value).startswith(f"--wait {value!r}: must be a positive duration: a number of")
    assert "'500ms'" in str(e.value)


def test_a_duration_may_allow_zero_or_require_whole_seconds() -> None:
    assert parse_duration("--delay", "0s", allow_zero=True) == 0.0
    assert parse_duration("--message-ttl", "7d", whole=True) == 604800.0
    with pytest.raises(InvalidSetting, match=r"--message-ttl '1\.5s': must be whole seconds"):
        parse_duration("--message-ttl", "1.5s", whole=True)
