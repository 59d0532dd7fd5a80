"""The package as pip installs it: its metadata, its extras and a wheel in a fresh venv.

The fast tests hold pyproject.toml, constraints.txt and ``errors.EXTRAS`` to one
another and run ``bdq`` with the optional packages hidden. The slow ones build
the wheel, install it with only its core dependencies (from PyPI, pinned by
constraints.txt) into a virtual environment of their own, and use it as a user
would: ``bdq --version``, a command that needs a missing extra, a send and a
receive against the test Cassandra. They share one venv (about 25 s to build,
most of it pip) and are marked ``slow`` and ``cassandra``, so that ``make check``
leaves them to ``make test``.
"""

from __future__ import annotations

import fnmatch
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tomllib
import uuid
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import spark_queue
from spark_queue.config import ConnectionSettings
from spark_queue.errors import EXTRAS, LocalNodeError, MissingExtra
from spark_queue.local.node_conf import TEMPLATES, default_conf_dir

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
#: The packages of the extras, which the core install must go without.
OPTIONAL = (
    "pyspark",
    "pyarrow",
    "pandas",
    "yaml",
    "psutil",
    "cryptography",
    "prometheus_client",
    "starlette",
    "uvicorn",
    "aiohttp",
    "botocore",
)
#: Hides OPTIONAL from a Python process, as if they were not installed; then runs bdq.
BDQ_WITHOUT_EXTRAS = (
    "import sys\n"
    f"sys.modules.update(dict.fromkeys({OPTIONAL!r}))\n"
    "from spark_queue.cli import main\n"
    "main(sys.argv[1:], prog_name='bdq')\n"
)


def _requirements(names: Sequence[str]) -> list[Requirement]:
    return [Requirement(text) for text in names]


def _constraints() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[canonicalize_name(name)] = version
    return pins


# -- the metadata ------------------------------------------------------------------


def test_each_extra_brings_the_modules_errors_name_for_it() -> None:
    extras = dict(PROJECT["optional-dependencies"])
    extras.pop("dev")
    # Import names differ from distribution names (PyYAML installs yaml): ask the installed ones.
    modules_of: dict[str, set[str]] = {}
    for module, dists in importlib.metadata.packages_distributions().items():
        for dist in dists:
            modules_of.setdefault(canonicalize_name(dist), set()).add(module)

    assert extras.keys() == EXTRAS.keys()
    for extra, texts in extras.items():
        named = set(EXTRAS[extra])
        everything: set[str] = set()
        for requirement in _requirements(texts):
            brought = modules_of.get(canonicalize_name(requirement.name), set())
            assert brought & named, f"extra {extra!r}: {requirement.name} brings {brought}"
            everything |= brought
        assert named <= everything, f"extra {extra!r}: {named - everything} come from none"


def test_the_core_leaves_out_spark_cryptography_and_prometheus() -> None:
    core = {canonicalize_name(r.name) for r in _requirements(PROJECT["dependencies"])}

    assert core.isdisjoint(canonicalize_name(m) for m in OPTIONAL)
    assert core == {"cassandra-driver", "click", "rich", "tenacity"}


def test_dev_installs_every_extra() -> None:
    own = [
        r for r in _requirements(PROJECT["optional-dependencies"]["dev"]) if r.name == "spark-queue"
    ]

    assert len(own) == 1
    assert own[0].extras == set(EXTRAS)


def test_constraints_pin_every_requirement_within_its_range() -> None:
    pins = _constraints()
    texts = list(PROJECT["dependencies"])
    for extra in PROJECT["optional-dependencies"].values():
        texts += extra
    for requirement in _requirements(texts):
        name = canonicalize_name(requirement.name)
        if name == "spark-queue":
            continue
        assert name in pins, f"{requirement}: not pinned in constraints.txt"
        assert requirement.specifier.contains(pins[name]), f"{requirement}: pinned {pins[name]}"


def test_the_version_is_written_once() -> None:
    assert "version" not in PROJECT
    assert "version" in PROJECT["dynamic"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "spark_queue.__version__"
    }


def test_the_node_templates_are_package_data(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BDQ_CONF_DIR", raising=False)
    globs = PYPROJECT["tool"]["setuptools"]["package-data"]["spark_queue"]
    package = ROOT / "spark_queue"
    files = sorted(p.relative_to(package).as_posix() for p in TEMPLATES.iterdir())

    assert files == [f"local/templates/{n}" for n in ("cassandra.yaml", "logback.xml", "pom.xml")]
    assert all(any(fnmatch.fnmatch(f, g) for g in globs) for f in files)
    assert default_conf_dir() == TEMPLATES


def test_a_conf_dir_without_the_templates_is_refused_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "cassandra").mkdir()
    (tmp_path / "cassandra" / "cassandra.yaml").write_text("cluster_name: x\n")
    monkeypatch.setenv("BDQ_CONF_DIR", str(tmp_path))

    with pytest.raises(LocalNodeError) as raised:
        default_conf_dir()
    message = str(raised.value)
    assert f"BDQ_CONF_DIR={tmp_path}" in message
    assert "the local node templates logback.xml, pom.xml are missing" in message


# -- the extras, hidden ---------------------------------------------------------------


def test_without_cryptography_the_certificates_name_the_local_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "cryptography", None)  # restored after the test
    monkeypatch.delitem(sys.modules, "spark_queue.local.certificates", raising=False)

    with pytest.raises(MissingExtra) as raised:
        import spark_queue.local.certificates  # noqa: F401

    assert raised.value.extra == "local"
    assert isinstance(raised.value, ImportError)
    assert str(raised.value) == (
        "making the local node's TLS certificates (bdq cassandra start --tls) needs the"
        " 'local' extra (cryptography is not installed): pip install 'spark-queue[local]'"
    )


def test_without_pyyaml_the_node_config_names_the_local_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spark_queue.local.node_conf import NodeSpec, write_config

    monkeypatch.setitem(sys.modules, "yaml", None)  # restored after the test
    spec = NodeSpec(1, "127.0.0.1", 9042, 7000, 7199, tmp_path / "node1")
    spec.make_folders()

    with pytest.raises(MissingExtra) as raised:
        write_config(spec, TEMPLATES, seed=spec, auto_bootstrap=False, settings={})

    assert raised.value.extra == "local"
    assert str(raised.value) == (
        "the local Cassandra node (bdq cassandra) needs the 'local' extra (yaml is not"
        " installed): pip install 'spark-queue[local]'"
    )


def _bdq_without_extras(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", BDQ_WITHOUT_EXTRAS, *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_bdq_works_without_the_extras() -> None:
    result = _bdq_without_extras("--help")

    assert result.returncode == 0, result.stderr
    assert "cassandra" in result.stdout and "bench" in result.stdout
    for args in (("top", "--help"), ("metrics", "serve", "--help")):
        assert _bdq_without_extras(*args).returncode == 0, args


def test_the_queue_sends_and_receives_without_the_extras() -> None:
    # Given a process where no optional package imports
    probe = (
        "import sys\n"
        f"sys.modules.update(dict.fromkeys({OPTIONAL!r}))\n"
        "from spark_queue import QueueClient\n"
        "from spark_queue.engine import counters\n"
        "from spark_queue.store.memory import MemoryStore\n"
        "with QueueClient(store=MemoryStore('ks')) as client:\n"
        "    q = client.create_queue('q')\n"
        "    q.send_batch([b'a', b'b'])\n"
        "    got = q.receive(max_messages=2)\n"
        "    q.ack_batch([d.receipt for d in got])\n"
        "print(sorted(d.payload.decode() for d in got),"
        " dict(counters.SENT.samples()), dict(counters.ACKED.samples()))\n"
        "print(sorted(m for m in " + repr(OPTIONAL) + " if sys.modules.get(m) is not None))\n"
    )

    # When a queue sends, receives and acks there
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=ROOT
    )

    # Then it worked and counted, in the process's own counters
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "['a', 'b'] {('ks', 'q'): 2.0} {('ks', 'q'): 2.0}",
        "[]",
    ]


def test_metrics_serve_without_its_extra_fails_in_one_line() -> None:
    result = _bdq_without_extras("metrics", "serve", "--port", "1")

    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines() == [
        "Error: bdq metrics serve needs the 'metrics' extra (prometheus_client is not"
        " installed): pip install 'spark-queue[metrics]'"
    ]


def test_serve_without_its_extra_fails_in_one_line() -> None:
    result = _bdq_without_extras("serve", "--port", "1")

    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines() == [
        "Error: the SQS service (bdq serve, bdq access-key) needs the 'serve' extra"
        " (cryptography.fernet is not installed): pip install 'spark-queue[serve]'"
    ]


def test_the_exporter_module_names_the_metrics_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # restored after the test
    monkeypatch.delitem(sys.modules, "spark_queue.ops.prometheus", raising=False)

    with pytest.raises(MissingExtra) as raised:
        import spark_queue.ops.prometheus  # noqa: F401

    assert raised.value.extra == "metrics"
    assert "pip install 'spark-queue[metrics]'" in str(raised.value)


def test_bdq_version_from_a_checkout_that_is_not_installed() -> None:
    # Given a process where the package metadata cannot be found (a plain checkout)
    probe = (
        "import importlib.metadata as metadata\n"
        "installed = metadata.version\n"
        "def version(name):\n"
        "    if name == 'spark-queue':\n"
        "        raise metadata.PackageNotFoundError(name)\n"
        "    return installed(name)\n"
        "metadata.version = version\n"
        "from spark_queue.cli import main\n"
        "main(['--version'], prog_name='bdq')\n"
    )

    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=ROOT
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout == f"bdq {spark_queue.__version__}\n"


@pytest.mark.parametrize(
    "args", [("bench", "spark"), ("bench", "faults", "--pipeline")], ids=" ".join
)
def test_a_command_without_its_extra_fails_in_one_line(args: tuple[str, ...]) -> None:
    result = _bdq_without_extras(*args)

    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines() == [
        f"Error: bdq {' '.join(args)} needs the 'spark' extra (pyarrow is not installed):"
        " pip install 'spark-queue[spark]'"
    ]


# -- the wheel, in a venv of its own ----------------------------------------------


def in_a_venv(test: Callable[..., None]) -> Callable[..., None]:
    """Mark a test of the installed wheel: slow, and out of the fast tier (it reaches PyPI)."""
    return pytest.mark.slow(pytest.mark.cassandra(test))


@dataclass(frozen=True)
class Installed:
    """The wheel, and the virtual environment it was installed into with its core only."""

    wheel: Path
    venv: Path

    def run(
        self, *args: str | Path, env: Mapping[str, str] | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run a program of the venv's ``bin/``; see ``_run``."""
        return _run(self.venv, *args, env=env, timeout=timeout)


def _run(
    venv: Path, *args: str | Path, env: Mapping[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``venv/bin/args[0]`` in the venv's folder, so nothing of the checkout is on its path."""
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    command = [str(venv / "bin" / args[0]), *map(str, args[1:])]
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=venv,
        env=clean | dict(env or {}),
    )


def _checked(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, f"{result.args}: exit {result.returncode}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """spark-queue's wheel, built from this checkout and pip-installed without extras."""
    work = tmp_path_factory.mktemp("package")
    # Build from a copy: pip builds in the source tree and would leave build/ in the checkout.
    source = work / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE", "pyspark_bdq.py"):
        shutil.copy(ROOT / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "spark_queue", source / "spark_queue", ignore=ignore)
    venv = work / "venv"
    _checked(subprocess.run([sys.executable, "-m", "venv", venv], capture_output=True, text=True))
    pip = ("python", "-m", "pip", "--disable-pip-version-check")
    _checked(_run(venv, *pip, "wheel", "-q", "--no-deps", "-w", work, source, timeout=600))
    (wheel,) = work.glob("spark_queue-*.whl")
    _checked(_run(venv, *pip, "install", "-q", "-c", ROOT / "constraints.txt", wheel, timeout=900))
    return Installed(wheel, venv)


@in_a_venv
def test_the_wheel_holds_the_license_templates_and_metadata(installed: Installed) -> None:
    version = spark_queue.__version__
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = set(wheel.namelist())
        metadata = wheel.read(f"spark_queue-{version}.dist-info/METADATA").decode()
    headers = [line.split(": ", 1) for line in metadata.split("\n\n")[0].splitlines()]

    assert installed.wheel.name == f"spark_queue-{version}-py3-none-any.whl"
    assert f"spark_queue-{version}.dist-info/licenses/LICENSE" in names
    templates = {f"spark_queue/local/templates/{n}" for n in ("cassandra.yaml", "logback.xml")}
    templates.add("spark_queue/local/templates/pom.xml")
    assert templates | {"spark_queue/store/schema.cql", "pyspark_bdq.py"} <= names
    assert ["Version", version] in headers
    assert ["License-Expression", "Apache-2.0"] in headers
    assert {v for k, v in headers if k == "Provides-Extra"} == {*EXTRAS, "dev"}
    assert ["Classifier", "Typing :: Typed"] in headers


@in_a_venv
def test_the_core_install_has_no_extra_and_finds_its_templates(installed: Installed) -> None:
    probe = f"""
import importlib.util, json, pathlib, spark_queue
from spark_queue.errors import MissingExtra
from spark_queue.local.node import LocalCluster
from spark_queue.local.node_conf import default_conf_dir, write_config
node = LocalCluster(home=pathlib.Path("node-home")).node(1)
node.make_folders()
try:
    write_config(node, default_conf_dir(), seed=node, auto_bootstrap=False, settings={{}})
    refused = None
except MissingExtra as e:
    refused = str(e)
print(json.dumps({{
    "package": spark_queue.__file__,
    "conf": str(default_conf_dir()),
    "present": [m for m in {OPTIONAL!r} if importlib.util.find_spec(m)],
    "templates": sorted(p.name for p in default_conf_dir().iterdir()),
    "refused": refused,
}}))
"""
    found = json.loads(_checked(installed.run("python", "-c", probe)).stdout)

    assert found["present"] == []
    assert found["package"].startswith(str(installed.venv))
    assert found["conf"].startswith(str(installed.venv))
    assert found["templates"] == ["cassandra.yaml", "logback.xml", "pom.xml"]
    # Rendering the node's cassandra.yaml is the local extra's (PyYAML)
    assert found["refused"] == (
        "the local Cassandra node (bdq cassandra) needs the 'local' extra (yaml is not"
        " installed): pip install 'spark-queue[local]'"
    )


@in_a_venv
def test_bdq_says_its_version_and_helps_from_the_wheel(installed: Installed) -> None:
    version = _checked(installed.run("bdq", "--version")).stdout
    start_help = _checked(installed.run("bdq", "cassandra", "start", "--help")).stdout

    assert version == f"bdq {spark_queue.__version__}\n"
    assert "--tls" in start_help


@in_a_venv
def test_a_command_that_needs_an_extra_fails_in_one_line_from_the_wheel(
    installed: Installed,
) -> None:
    result = installed.run("bdq", "bench", "spark")

    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("Error: bdq bench spark needs the 'spark' extra (")
    assert line.endswith(" is not installed): pip install 'spark-queue[spark]'")


@pytest.fixture
def wheel_env(_module_keyspace: ConnectionSettings) -> dict[str, str]:
    """BDQ_* variables naming the test Cassandra and this module's keyspace."""
    env = {
        "BDQ_CASSANDRA_HOSTS": ",".join(str(h) for h in _module_keyspace.hosts),
        "BDQ_KEYSPACE": _module_keyspace.keyspace,
    }
    if _module_keyspace.local_dc:
        env["BDQ_LOCAL_DC"] = _module_keyspace.local_dc
    return env


@in_a_venv
def test_send_and_receive_with_the_wheel(installed: Installed, wheel_env: dict[str, str]) -> None:
    queue = f"pkg_{uuid.uuid4().hex[:8]}"
    _checked(installed.run("bdq", "queue", "create", queue, env=wheel_env))
    try:
        _checked(installed.run("bdq", "send", queue, "from the wheel", env=wheel_env))
        received = _checked(
            installed.run("bdq", "receive", queue, "--ack", "--wait", "5", "--json", env=wheel_env)
        )
        left = _checked(installed.run("bdq", "peek", queue, "--json", env=wheel_env))
    finally:
        _checked(
            installed.run("bdq", "queue", "delete", queue, "--missing-ok", "--yes", env=wheel_env)
        )

    assert [m["payload"] for m in json.loads(received.stdout)] == ["from the wheel"]
    assert json.loads(left.stdout) == []


def test_a_source_runner_imports_neither_the_sink_nor_pyarrow_compute() -> None:
    # Spark starts a fresh Python process per streaming query to host its source,
    # which imports pyspark's runner and then the connector: both are part of
    # every query's start, and a source never writes (30 ms of imports saved).
    unwanted = ("spark_queue.spark.sink", "pyarrow.compute")
    probe = (
        "import sys\n"
        "import pyspark.sql.streaming.python_streaming_source_runner\n"
        "import spark_queue.spark.datasource\n"
        f"print(sorted(m for m in {unwanted!r} if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["[]"]
