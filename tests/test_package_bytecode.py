"""``lacking_bytecode`` agrees with what Python's importer compiles (``ops/package_bytecode``)."""

from __future__ import annotations

import ast
import compileall
import os
import py_compile
import subprocess
import sys
from pathlib import Path

import pytest

from spark_queue.ops.package_bytecode import lacking_bytecode

# Imports pkgy.mod with bytecode writing off and prints the files Python compiled.
PROBE = """
import builtins, sys
compiled = []
original = builtins.compile
def spy(source, filename, *args, **kwargs):
    compiled.append(filename)
    return original(source, filename, *args, **kwargs)
builtins.compile = spy
import pkgy.mod
builtins.compile = original
print(sorted(compiled))
"""


@pytest.fixture
def package(tmp_path: Path) -> Path:
    root = tmp_path / "pkgy"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "mod.py").write_text("VALUE = 1\n")
    return root


def compiled_on_import(package: Path) -> list[str]:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(package.parent)}
    result = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return [Path(name).name for name in ast.literal_eval(result.stdout)]


def test_what_lacks_bytecode_is_what_python_compiles(package: Path) -> None:
    # Given modules never imported: both lack bytecode, and Python compiles both
    assert [p.name for p in lacking_bytecode(package)] == ["__init__.py", "mod.py"]
    assert compiled_on_import(package) == ["__init__.py", "mod.py"]

    # When they are compiled: neither lacks it, and Python compiles neither
    compileall.compile_dir(str(package), quiet=1)
    assert lacking_bytecode(package) == []
    assert compiled_on_import(package) == []

    # When a module changes afterwards: it lacks bytecode again, and Python compiles it
    (package / "mod.py").write_text("VALUE = 22\n")
    assert [p.name for p in lacking_bytecode(package)] == ["mod.py"]
    assert compiled_on_import(package) == ["mod.py"]


@pytest.mark.parametrize(
    ("mode", "current"),
    [
        (py_compile.PycInvalidationMode.CHECKED_HASH, False),
        (py_compile.PycInvalidationMode.UNCHECKED_HASH, True),
    ],
)
def test_hash_based_bytecode_of_a_changed_module(
    package: Path, mode: py_compile.PycInvalidationMode, current: bool
) -> None:
    compileall.compile_dir(str(package), quiet=1, invalidation_mode=mode)
    (package / "mod.py").write_text("VALUE = 333\n")

    assert ([p.name for p in lacking_bytecode(package)] == []) is current
    assert (compiled_on_import(package) == []) is current
