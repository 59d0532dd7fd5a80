"""The layout rules of docs/architecture.md that no linter checks: sizes, names, the top level.

The layers and the absence of import cycles are import-linter contracts
(``make lint``, ``[tool.importlinter]`` in pyproject.toml); these tests hold
the rest of what makes a module easy to find and to hold in one's head.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = (ROOT / "spark_queue", ROOT / "jobs")
#: A module longer than this holds more than one concept (issue 20).
MAX_LINES = 500
#: What a user imports; the engine's internals live one floor down, in spark_queue/engine/.
PUBLIC_TOP_LEVEL = {"__init__", "client", "queue", "producer", "message", "errors", "config"}
#: Documented constants, imported by config at the bottom layer (rq's defaults.py).
SHARED_TOP_LEVEL = {"defaults"}
SUBPACKAGES = {"engine", "store", "ops", "service", "spark", "cli", "bench", "local"}


def modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in package.rglob("*.py"))


def opening_sentence(path: Path) -> str | None:
    doc = ast.get_docstring(ast.parse(path.read_text()))
    return doc.split("\n\n")[0].split(". ")[0].strip() if doc else None


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_exceeds_the_size_of_one_concept(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(ROOT)}: {lines} lines (at most {MAX_LINES})"


def test_no_two_modules_share_a_name() -> None:
    by_name: dict[str, list[str]] = defaultdict(list)
    for path in modules():
        if path.stem not in ("__init__", "__main__"):
            by_name[path.stem].append(str(path.relative_to(ROOT)))
    shared = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    assert not shared, f"module names used twice: {shared}"


def test_no_two_modules_open_with_the_same_sentence() -> None:
    by_sentence: dict[str, list[str]] = defaultdict(list)
    for path in modules():
        sentence = opening_sentence(path)
        if sentence:
            by_sentence[sentence].append(str(path.relative_to(ROOT)))
    shared = {s: paths for s, paths in by_sentence.items() if len(paths) > 1}
    assert not shared, f"opening sentences used twice: {shared}"


def test_every_module_says_what_it_is() -> None:
    silent = [str(p.relative_to(ROOT)) for p in modules() if opening_sentence(p) is None]
    assert not silent, f"modules without a docstring: {silent}"


def test_the_top_level_holds_only_what_users_import() -> None:
    top = ROOT / "spark_queue"
    found = {p.stem for p in top.glob("*.py")}
    assert found == PUBLIC_TOP_LEVEL | SHARED_TOP_LEVEL
    folders = {p.name for p in top.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == SUBPACKAGES
    assert all((top / name / "__init__.py").exists() for name in SUBPACKAGES)


def test_the_public_api_is_exactly_all() -> None:
    import spark_queue

    public = {name for name in vars(spark_queue) if not name.startswith("_")}
    modules_of_the_package = {"client", "config", "errors", "message", "producer", "queue"}
    modules_of_the_package |= {"defaults", "engine", "store", "ops", "spark", "cli", "bench"}
    modules_of_the_package |= {"local", "service", "annotations"}
    assert public - modules_of_the_package == set(spark_queue.__all__) - {"__version__"}


def test_the_module_map_names_every_module() -> None:
    """docs/architecture.md is the one module map: a module missing from it is a map out of date."""
    page = (ROOT / "docs" / "architecture.md").read_text()
    missing = [
        str(p.relative_to(ROOT))
        for p in modules()
        if p.stem not in ("__init__", "__main__") and f"`{p.name}`" not in page
    ]
    assert not missing, f"modules missing from docs/architecture.md's module map: {missing}"
