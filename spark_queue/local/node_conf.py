"""A local node's configuration: where its files live, its cassandra.yaml and its JVM flags.

What Cassandra's own ``conf/`` folder and ``bin/cassandra`` script would hold
for a node: the folders of a node (``NodeSpec``), its ``cassandra.yaml``
rendered from the template in ``templates/`` (package data, beside this
module, so an installed wheel has it too) with the node's address, ports and
extra settings, and the Java command line that runs it. Starting, stopping and
watching the process is ``node.LocalCluster``'s.

The rendered file is read and written with PyYAML (the ``local`` extra), not
edited line by line: a setting lands as a YAML value whatever its shape (a
number, a flag, a nested table such as ``client_encryption_options``), and a
value that is not YAML is refused before the node starts rather than by the
node's own parser.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import string
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from spark_queue.errors import LocalNodeError, MissingExtra

# From Cassandra's conf/jvm17-server.options (JPMS, netty) and its G1 settings.
JVM17_FLAGS = (
    "-XX:+UseG1GC",
    "-XX:+ParallelRefProcEnabled",
    "-XX:MaxTenuringThreshold=1",
    "-XX:G1HeapRegionSize=16m",
    "-XX:MaxGCPauseMillis=300",
    "-Djdk.attach.allowAttachSelf=true",
    "--add-exports=java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-exports=java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED",
    "--add-exports=java.rmi/sun.rmi.registry=ALL-UNNAMED",
    "--add-exports=java.rmi/sun.rmi.server=ALL-UNNAMED",
    "--add-exports=java.sql/java.sql=ALL-UNNAMED",
    "--add-exports=java.base/java.lang.ref=ALL-UNNAMED",
    "--add-exports=jdk.unsupported/sun.misc=ALL-UNNAMED",
    "--add-exports=jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED",
    "--add-exports=jdk.attach/sun.tools.attach=ALL-UNNAMED",
    "--add-opens=java.base/java.lang.module=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.loader=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.reflect=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.math=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.module=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.util.jar=ALL-UNNAMED",
    "--add-opens=jdk.management/com.sun.management.internal=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/java.io=ALL-UNNAMED",
    "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED",
    "--add-opens=jdk.compiler/com.sun.tools.javac=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
    "-Dio.netty.tryReflectionSetAccessible=true",
    "-Dio.netty.allocator.useCacheForAllThreads=true",
    "-Dio.netty.allocator.maxOrder=11",
)


#: What ``cassandra.yaml`` says for a node that asks for passwords and checks permissions.
AUTH_SETTINGS = {"authenticator": "PasswordAuthenticator", "authorizer": "CassandraAuthorizer"}
#: The role a node with roles makes at its first start (Cassandra's default superuser).
DEFAULT_SUPERUSER = ("cassandra", "cassandra")

#: The node templates (cassandra.yaml, logback.xml, pom.xml), package data of spark_queue.
TEMPLATES = Path(__file__).resolve().parent / "templates"


def _project_root() -> Path | None:
    """The source checkout this package runs from, if it runs from one (not an installed wheel)."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() else None  # site-packages has none


def default_home() -> Path:
    """Where local nodes live: ``$BDQ_HOME``, else ``.bdq/`` in the checkout, else ``~/.bdq``."""
    if os.environ.get("BDQ_HOME"):
        return Path(os.environ["BDQ_HOME"]).expanduser()
    root = _project_root()
    return root / ".bdq" if root else Path.home() / ".bdq"


def default_conf_dir() -> Path:
    """Where the node templates live: ``$BDQ_CONF_DIR/cassandra``, else the package's ``TEMPLATES``.

    ``BDQ_CONF_DIR`` points at a folder with a ``cassandra/`` folder holding edited
    copies of all three templates.
    """
    if os.environ.get("BDQ_CONF_DIR"):
        conf_dir = Path(os.environ["BDQ_CONF_DIR"]).expanduser() / "cassandra"
        source = f"BDQ_CONF_DIR={os.environ['BDQ_CONF_DIR']}"
    else:
        conf_dir, source = TEMPLATES, "the spark_queue package"
    missing = [
        n for n in ("cassandra.yaml", "logback.xml", "pom.xml") if not (conf_dir / n).is_file()
    ]
    if missing:
        raise LocalNodeError(
            f"{conf_dir} ({source}): the local node templates {', '.join(missing)} are missing;"
            " copy them from spark_queue/local/templates/ (or unset BDQ_CONF_DIR), reinstall"
            " spark-queue, or point BDQ_CASSANDRA_HOSTS at your own cluster"
        )
    return conf_dir


@dataclass(frozen=True)
class NodeSpec:
    """Where one local node listens and keeps its files."""

    index: int
    address: str
    native_port: int
    storage_port: int
    jmx_port: int
    folder: Path
    #: None for plain text, else "optional" or "required" (client TLS).
    tls: str | None = None
    #: Whether the node asks for a password and checks permissions (roles).
    auth: bool = False

    @property
    def pid_file(self) -> Path:
        return self.folder / "cassandra.pid"

    @property
    def log_file(self) -> Path:
        return self.folder / "logs" / "system.log"

    @property
    def console_file(self) -> Path:
        return self.folder / "logs" / "console.log"

    def make_folders(self) -> None:
        """Create the node's ``conf``, ``logs`` and ``data`` folders (kept if they exist)."""
        (self.folder / "conf").mkdir(parents=True, exist_ok=True)
        (self.folder / "logs").mkdir(exist_ok=True)
        (self.folder / "data").mkdir(exist_ok=True)


def write_config(
    spec: NodeSpec,
    conf_dir: Path,
    *,
    seed: NodeSpec,
    auto_bootstrap: bool,
    settings: Mapping[str, object],
) -> None:
    """Render the node's ``cassandra.yaml`` and copy ``logback.xml`` into its ``conf`` folder.

    Args:
        spec: The node; its address, ports and TLS mode are recorded in ``node.json``.
        conf_dir: Folder of the ``cassandra.yaml`` and ``logback.xml`` templates.
        seed: The first node, every node's seed.
        auto_bootstrap: Whether the node streams data in as it joins (every node but the first).
        settings: Extra top-level ``cassandra.yaml`` settings: a text value is read
            as YAML (``"8"`` is a number, ``"{a: b}"`` a table), any other value is
            written as it is.

    Raises:
        LocalNodeError: The filled-in template is not a YAML table, or a setting's
            key or value is not one ``cassandra.yaml`` could hold.
        MissingExtra: PyYAML (the ``local`` extra) is not installed.
    """
    conf = spec.folder / "conf"
    source = conf_dir / "cassandra.yaml"
    template = string.Template(source.read_text())
    text = template.substitute(
        cluster_name="bdq-local",
        address=spec.address,
        seeds=f"{seed.address}:{seed.storage_port}",
        native_port=spec.native_port,
        storage_port=spec.storage_port,
        auto_bootstrap="true" if auto_bootstrap else "false",
    )
    (conf / "cassandra.yaml").write_text(render_yaml(text, settings, source))
    shutil.copyfile(conf_dir / "logback.xml", conf / "logback.xml")
    meta = {k: v for k, v in asdict(spec).items() if k != "folder"}
    (spec.folder / "node.json").write_text(json.dumps(meta, indent=2) + "\n")


def jvm_command(
    spec: NodeSpec, java: str, heap: str, classpath: Sequence[Path], agent: Path | None
) -> list[str]:
    """The command line that runs the node's ``CassandraDaemon`` in the foreground."""
    conf = spec.folder / "conf"
    return [
        java,
        f"-Xms{heap}",
        f"-Xmx{heap}",
        "-Xss256k",
        "-XX:+HeapDumpOnOutOfMemoryError",
        "-XX:+ExitOnOutOfMemoryError",  # a node past OOM may corrupt data: let it die
        f"-XX:HeapDumpPath={spec.folder / 'logs'}",
        "-Djava.net.preferIPv4Stack=true",
        *JVM17_FLAGS,
        *([f"-javaagent:{agent}"] if agent else []),
        f"-Dcassandra.config={(conf / 'cassandra.yaml').as_uri()}",
        f"-Dlogback.configurationFile={conf / 'logback.xml'}",
        f"-Dcassandra.logdir={spec.folder / 'logs'}",
        f"-Dcassandra.storagedir={spec.folder / 'data'}",
        f"-Dcassandra.jmx.local.port={spec.jmx_port}",
        "-Dcassandra-foreground=yes",
        # A fresh development cluster has nothing to wait for: skip the
        # 30 s ring delay and gossip settling that protect production joins.
        "-Dcassandra.ring_delay_ms=2000",
        "-Dcassandra.skip_wait_for_gossip_to_settle=0",
        # With roles: the default superuser now, not 10 s after the node answers.
        *(["-Dcassandra.superuser_setup_delay_ms=0"] if spec.auth else []),
        "-cp",
        os.pathsep.join([str(conf), *map(str, classpath)]),
        "org.apache.cassandra.service.CassandraDaemon",
    ]


#: A key ``--set`` may give: a top-level ``cassandra.yaml`` setting name.
_KEY = re.compile(r"[a-z_][a-z0-9_]*")


def render_yaml(text: str, settings: Mapping[str, object], source: Path) -> str:
    """The filled-in template ``text`` with top-level ``settings`` replaced or added, as YAML.

    Args:
        text: The template of ``source`` with its fields filled in.
        settings: Top-level keys and their values; text is read as YAML.
        source: Where the template came from (named in errors).
    """
    # Imported on first use, so that bdq itself runs without the local extra.
    try:
        import yaml
    except ImportError as e:
        raise MissingExtra("the local Cassandra node (bdq cassandra)", "local", e.name) from e
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise LocalNodeError(
            f"{source}: not valid YAML once filled in ({e}); fix the template, or unset"
            " BDQ_CONF_DIR to use the one of the spark_queue package"
        ) from e
    if not isinstance(config, dict):
        raise LocalNodeError(
            f"{source}: holds {type(config).__name__}, not a table of settings;"
            " a cassandra.yaml template is a list of 'key: value' lines"
        )
    for key, value in settings.items():
        if not _KEY.fullmatch(key):
            raise LocalNodeError(
                f"setting {key!r}: must be a top-level cassandra.yaml key"
                " (lower case letters, digits and '_'), such as 'concurrent_reads'"
            )
        config[key] = _yaml_value(key, value) if isinstance(value, str) else value
    header = (
        f"# Rendered by spark-queue from {source} for this node alone;\n"
        "# change the template or pass --set KEY=VALUE, not this file.\n"
    )
    return header + yaml.safe_dump(config, sort_keys=False, default_flow_style=False)


def _yaml_value(key: str, text: str) -> object:
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        problem = str(e).splitlines()[0]
        raise LocalNodeError(
            f"setting {key}={text!r}: not a YAML value ({problem}); quote text that holds"
            " YAML signs, and write a table in flow style, such as '{enabled: true}'"
        ) from e
