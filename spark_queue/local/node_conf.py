"""A local node's configuration: where its files live, its cassandra.yaml and its JVM flags.

What Cassandra's own ``conf/`` folder and ``bin/cassandra`` script would hold
for a node: the folders of a node (``NodeSpec``), its ``cassandra.yaml``
rendered from the template in ``templates/`` (package data, beside this
module, so an installed wheel has it too) with the node's address, ports and
extra settings, and the Java command line that runs it. Starting, stopping and
watching the process is ``node.LocalCluster``'s.
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

from spark_queue.errors import LocalNodeError

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
    settings: Mapping[str, str],
) -> None:
    """Render the node's ``cassandra.yaml`` and copy ``logback.xml`` into its ``conf`` folder.

    Args:
        spec: The node; its address, ports and TLS mode are recorded in ``node.json``.
        conf_dir: Folder of the ``cassandra.yaml`` and ``logback.xml`` templates.
        seed: The first node, every node's seed.
        auto_bootstrap: Whether the node streams data in as it joins (every node but the first).
        settings: Extra top-level ``cassandra.yaml`` settings.
    """
    conf = spec.folder / "conf"
    template = string.Template((conf_dir / "cassandra.yaml").read_text())
    text = template.substitute(
        cluster_name="bdq-local",
        address=spec.address,
        seeds=f"{seed.address}:{seed.storage_port}",
        native_port=spec.native_port,
        storage_port=spec.storage_port,
        auto_bootstrap="true" if auto_bootstrap else "false",
    )
    (conf / "cassandra.yaml").write_text(_override_yaml(text, settings))
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


def _override_yaml(text: str, settings: Mapping[str, str]) -> str:
    """Replace (or append) top-level ``key: value`` lines."""
    for key, value in settings.items():
        if not re.fullmatch(r"[a-z_][a-z0-9_]*", key):
            raise LocalNodeError(f"setting {key!r}: must be a top-level cassandra.yaml key")
        line = f"{key}: {value}"
        text, count = re.subn(rf"(?m)^{key}:.*$", line, text)
        if count == 0:
            text += f"\n{line}\n"
    return text
