"""A local node's cassandra.yaml (spark_queue.local.node_conf), rendered and read back as YAML."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from spark_queue.errors import LocalNodeError
from spark_queue.local.node_conf import TEMPLATES, NodeSpec, write_config
from spark_queue.local.tls import TlsFiles


def _node(tmp_path: Path, index: int = 1) -> NodeSpec:
    address = f"127.0.0.{70 + index}"
    spec = NodeSpec(index, address, 9042, 7000, 7400 + index, tmp_path / f"n{index}")
    spec.make_folders()
    return spec


def _written(spec: NodeSpec) -> dict[str, object]:
    loaded = yaml.safe_load((spec.folder / "conf" / "cassandra.yaml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def test_the_template_is_filled_in_for_the_node_and_its_seed(tmp_path: Path) -> None:
    seed, second = _node(tmp_path, 1), _node(tmp_path, 2)

    write_config(second, TEMPLATES, seed=seed, auto_bootstrap=True, settings={})

    conf = _written(second)
    assert conf["listen_address"] == conf["rpc_address"] == "127.0.0.72"
    assert conf["native_transport_port"] == 9042
    assert conf["auto_bootstrap"] is True
    assert conf["seed_provider"] == [
        {
            "class_name": "org.apache.cassandra.locator.SimpleSeedProvider",
            "parameters": [{"seeds": "127.0.0.71:7000"}],
        }
    ]
    assert conf["authenticator"] == "AllowAllAuthenticator"
    assert (second.folder / "conf" / "logback.xml").is_file()


def test_settings_replace_or_add_top_level_keys_as_yaml_values(tmp_path: Path) -> None:
    spec = _node(tmp_path)
    settings = {
        "concurrent_reads": "8",  # replaces the template's 16, as a number
        "authenticator": "PasswordAuthenticator",
        "materialized_views_enabled": "true",  # a key the template lacks
        "audit_logging_options": "{enabled: false, logger: {class_name: BinAuditLogger}}",
        "request_timeout": "20000ms",  # stays text
    }

    write_config(spec, TEMPLATES, seed=spec, auto_bootstrap=False, settings=settings)

    conf = _written(spec)
    assert conf["concurrent_reads"] == 8
    assert conf["authenticator"] == "PasswordAuthenticator"
    assert conf["materialized_views_enabled"] is True
    assert conf["audit_logging_options"] == {
        "enabled": False,
        "logger": {"class_name": "BinAuditLogger"},
    }
    assert conf["request_timeout"] == "20000ms"
    text = (spec.folder / "conf" / "cassandra.yaml").read_text()
    assert text.count("concurrent_reads:") == 1


def test_the_tls_table_lands_as_nested_yaml(tmp_path: Path) -> None:
    spec = _node(tmp_path)
    files = TlsFiles(tmp_path / "tls")

    write_config(
        spec, TEMPLATES, seed=spec, auto_bootstrap=False,
        settings=files.node_settings(required=True),
    )  # fmt: skip

    options = _written(spec)["client_encryption_options"]
    assert options == {
        "enabled": True,
        "optional": False,
        "ssl_context_factory": {
            "class_name": "org.apache.cassandra.security.PEMBasedSslContextFactory"
        },
        "keystore": str(files.node),
        "truststore": str(files.ca),
        "require_client_auth": True,
    }


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"Concurrent-Reads": "8"}, "setting 'Concurrent-Reads': must be a top-level"),
        ({"audit_logging_options": "{enabled: true"}, "setting audit_logging_options="),
        ({"cluster_name": "a: b: c"}, "not a YAML value"),
    ],
)
def test_a_setting_that_is_not_yaml_is_refused_by_name(
    tmp_path: Path, settings: dict[str, object], message: str
) -> None:
    spec = _node(tmp_path)

    with pytest.raises(LocalNodeError, match=message):
        write_config(spec, TEMPLATES, seed=spec, auto_bootstrap=False, settings=settings)


def test_a_template_that_is_not_a_table_is_refused_naming_the_file(tmp_path: Path) -> None:
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "cassandra.yaml").write_text("- just\n- a list\n")
    (conf_dir / "logback.xml").write_text("<configuration/>\n")
    spec = _node(tmp_path)

    with pytest.raises(LocalNodeError, match=r"cassandra\.yaml: holds list, not a table"):
        write_config(spec, conf_dir, seed=spec, auto_bootstrap=False, settings={})
