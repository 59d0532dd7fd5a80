"""The Python examples of the README and the docs run as written, in order, on a fresh keyspace.

Each document's ```python blocks run one after another in one namespace, as a
reader pastes them into one interpreter, against the test's own keyspace: the
examples use the default connection (``BDQ_CASSANDRA_HOSTS``, ``BDQ_KEYSPACE``,
else the local node's ``bdq``), which the test points at that keyspace through
the environment for the client and through ``spark.bdq.*`` for the connector
(Spark's Python workers do not see an environment set after Spark started).
The one change made to the text: checkpoints under ``/tmp/checkpoints/`` go to
the test's own folder, so that runs never resume each other's queries.

A block that cannot run here says why on the line before its fence, in an HTML
comment that neither GitHub nor the docs site shows::

    <!-- not run: names a cluster of your own (cass1, cass2) and its CA file -->

and a fast test checks that every Python block of every document is either run
here or marked so.
"""

from __future__ import annotations

import ast
import re
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from spark_queue.client import QueueClient
from spark_queue.config import ConnectionSettings

ROOT = Path(__file__).resolve().parents[1]
#: Documents whose Python blocks run, and whether they need Spark.
RUN = {
    "README.md": True,
    "docs/queue.md": False,
    "docs/spark.md": True,
    "docs/operations.md": False,
}
CHECKPOINTS = "/tmp/checkpoints/"

_FENCE = re.compile(r"^(?P<indent>\s*)```(?P<info>[^`\s]*)")
_NAMED = ("hosts", "keyspace")
_NOT_RUN = re.compile(r"^\s*<!-- not run: (?P<reason>\S.*?) -->\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced Python block: where it starts, its code, and why it is not run (if so)."""

    document: str
    line: int  # of the first line of code
    code: str
    not_run: str | None


def python_blocks(document: str) -> list[Block]:
    """The ```python (or ```py) blocks of ``document``, a path relative to the checkout."""
    lines = (ROOT / document).read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    number = 0
    while number < len(lines):
        opening = _FENCE.match(lines[number])
        number += 1
        if opening is None:
            continue
        indent, start = opening["indent"], number
        while number < len(lines) and not re.match(rf"^{indent}```\s*$", lines[number]):
            number += 1
        if opening["info"] in ("python", "py"):
            marker = _NOT_RUN.match(lines[start - 2]) if start >= 2 else None
            code = textwrap.dedent("\n".join(lines[start:number]))
            blocks.append(Block(document, start + 1, code, marker["reason"] if marker else None))
        number += 1  # past the closing fence
    return blocks


def documents() -> list[str]:
    """The README and every page of the docs, relative to the checkout."""
    pages = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))
    return ["README.md", *pages]


def test_every_python_block_is_run_or_says_why_not() -> None:
    found = {document: python_blocks(document) for document in documents()}

    unrun = [
        f"{b.document}:{b.line}"
        for blocks in found.values()
        for b in blocks
        if b.not_run is None and b.document not in RUN
    ]
    assert not unrun, (
        f"Python blocks that no test runs: {unrun}; add their document to RUN, or mark"
        " a block that cannot run with '<!-- not run: <why> -->' on the line before it"
    )
    assert all(found[document] for document in RUN), "a document in RUN has no Python block"
    assert sum(b.not_run is None for blocks in found.values() for b in blocks) >= 8


def outside_the_test(code: str) -> list[str]:
    """Where ``code`` would reach past the test's keyspace and folder.

    That is: it names hosts or a keyspace (``hosts=``, ``.option("keyspace", ...)``),
    which the environment cannot redirect, or a checkpoint outside ``/tmp/checkpoints/``.
    """
    found = []
    for node in ast.walk(ast.parse(code)):
        if not isinstance(node, ast.Call):
            continue
        found += [f"line {node.lineno}: {k.arg}=" for k in node.keywords if k.arg in _NAMED]
        if isinstance(node.func, ast.Attribute) and node.func.attr == "option" and node.args:
            name, value = (a.value if isinstance(a, ast.Constant) else None for a in node.args[:2])
            if str(name).lower() in _NAMED:
                found.append(f"line {node.lineno}: option {name!r}")
            if str(name).lower() == "checkpointlocation" and not str(value).startswith(CHECKPOINTS):
                found.append(f"line {node.lineno}: checkpoint {value!r}")
    return found


def test_the_run_blocks_stay_in_the_tests_keyspace_and_folder() -> None:
    # A block naming hosts or a keyspace would run against those (the developer's own
    # keyspace bdq, say), not the test's: such a block uses the defaults, or is not run.
    outside = {
        f"{b.document}:{b.line}": where
        for document in RUN
        for b in python_blocks(document)
        if b.not_run is None and (where := outside_the_test(b.code))
    }
    assert not outside, f"blocks that reach past the test's keyspace or folder: {outside}"
    code = 'QueueClient(hosts=["h"])\nx.option("Keyspace", "k").option("checkpointLocation", "/c")'
    assert sorted(outside_the_test(code)) == [
        "line 1: hosts=",
        "line 2: checkpoint '/c'",
        "line 2: option 'Keyspace'",
    ]


def test_the_parser_finds_blocks_markers_and_indented_fences(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "text\n```python\nx = 1\n```\n\n<!-- not run: needs a cluster -->\n```python\ny\n```\n"
        "- item:\n\n  ```py\n  if x:\n      z = 2\n  ```\n```sh\necho no\n```\n"
    )

    blocks = python_blocks(str(page))  # an absolute path wins over ROOT in the join

    assert [(b.line, b.code, b.not_run) for b in blocks] == [
        (3, "x = 1", None),
        (8, "y", "needs a cluster"),
        (13, "if x:\n    z = 2", None),
    ]


@pytest.fixture
def bdq_defaults(
    keyspace: ConnectionSettings, monkeypatch: pytest.MonkeyPatch
) -> ConnectionSettings:
    """The default connection of the examples, pointed at the test's keyspace."""
    monkeypatch.setenv("BDQ_CASSANDRA_HOSTS", ",".join(str(h) for h in keyspace.hosts))
    monkeypatch.setenv("BDQ_KEYSPACE", keyspace.keyspace)
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)  # the README sets it; restored after
    return keyspace


@pytest.fixture
def connector_defaults(
    request: pytest.FixtureRequest, bdq_defaults: ConnectionSettings
) -> Iterator[None]:
    """For a document with Spark examples: ``format("bdq")`` defaults to the test's keyspace."""
    if not RUN[request.node.callspec.params["document"]]:
        yield
        return
    from spark_queue.spark import BdqDataSource, register

    spark = request.getfixturevalue("spark")
    conf = {
        "spark.bdq.hosts": ",".join(str(h) for h in bdq_defaults.hosts),
        "spark.bdq.keyspace": bdq_defaults.keyspace,
    }
    for key, value in conf.items():
        spark.conf.set(key, value)
    register(spark)
    try:
        yield
    finally:
        for key in conf:
            spark.conf.unset(key)
        spark.dataSource.register(BdqDataSource)  # the plain source again, for later tests


@pytest.mark.parametrize(
    "document",
    [pytest.param(d, marks=[pytest.mark.spark] if spark else []) for d, spark in RUN.items()],
)
@pytest.mark.usefixtures("connector_defaults")
def test_the_python_blocks_of_a_document_run_in_order(
    document: str, bdq_defaults: ConnectionSettings, tmp_path: Path
) -> None:
    # Given the document's blocks that are meant to run, and a namespace for them all
    blocks = [b for b in python_blocks(document) if b.not_run is None]
    assert not any(outside_the_test(b.code) for b in blocks), "see the test of the keyspace"
    namespace: dict[str, object] = {"__name__": "__main__"}
    try:
        # When each runs in turn (its line numbers kept, so a traceback points into the page)
        for block in blocks:
            code = block.code.replace(CHECKPOINTS, f"{tmp_path}/checkpoints/")
            exec(compile("\n" * (block.line - 1) + code, str(ROOT / document), "exec"), namespace)
    finally:
        for value in namespace.values():
            if isinstance(value, QueueClient):
                value.close()

    # Then nothing raised, and the examples left their queues in the test's keyspace
    with QueueClient(settings=bdq_defaults) as client:
        assert "orders" in client.list_queues()
