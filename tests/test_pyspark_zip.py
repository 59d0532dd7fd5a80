"""``bdq spark compile-zip``: bytecode in Spark's pyspark.zip, used by Python and never stale."""

from __future__ import annotations

import importlib.util
import json
import marshal
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from spark_queue.cli import main
from spark_queue.errors import InvalidSetting
from spark_queue.ops.pyspark_zip import (
    ZIP_IN_SPARK_HOME,
    compile_zip,
    inspect_zip,
    is_test_entry,
    spark_home,
    zip_of,
)

# Imports pkgx.mod from the archive on PYTHONPATH and reports what Python compiled to do it
# (zipimport may compile one source more than once: each file counts once).
PROBE = """
import builtins, json, sys
compiled = []
real = builtins.compile
def spy(source, filename, *args, **kwargs):
    compiled.append(str(filename))
    return real(source, filename, *args, **kwargs)
builtins.compile = spy
import pkgx.mod
print(json.dumps({"value": pkgx.mod.VALUE, "file": pkgx.mod.__file__,
                  "compiled": sorted({f for f in compiled if "archive.zip" in f})}))
"""


def make_archive(path: Path, value: int = 1, extra: dict[str, bytes] | None = None) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("pkgx/", b"")
        archive.writestr("pkgx/__init__.py", b"")
        archive.writestr("pkgx/mod.py", f"VALUE = {value}\n".encode())
        archive.writestr("pkgx/data.txt", b"not python")
        for name, data in (extra or {}).items():
            archive.writestr(name, data)


def replace_entry(path: Path, name: str, data: bytes) -> None:
    """Rewrite ``path`` with ``name`` holding ``data``, every other entry as it was."""
    with zipfile.ZipFile(path) as archive:
        entries = [(info, archive.read(info)) for info in archive.infolist()]
    with zipfile.ZipFile(path, "w") as archive:
        for info, old in entries:
            archive.writestr(info, data if info.filename == name else old)


def probe(path: Path) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(path)}
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True
    )
    return dict(json.loads(out.stdout))


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    path = tmp_path / "archive.zip"
    make_archive(path)
    return path


def test_python_imports_the_added_bytecode_instead_of_compiling(archive: Path) -> None:
    # Given an archive of sources only: Python compiles each module it imports
    before = probe(archive)
    assert before["value"] == 1
    assert before["compiled"] == [
        f"{archive}/pkgx/__init__.py",
        f"{archive}/pkgx/mod.py",
    ]
    assert not inspect_zip(archive).complete

    # When it is compiled
    found = compile_zip(archive)

    # Then it holds current bytecode for each module, and Python compiles none of them
    assert (found.modules, found.compiled, found.uncompilable) == (2, 2, 0)
    assert found.complete
    after = probe(archive)
    assert after == {"value": 1, "file": f"{archive}/pkgx/mod.pyc", "compiled": []}
    # stored as is, which zipimport reads without inflating
    with zipfile.ZipFile(archive) as compiled:
        kinds = {i.filename: i.compress_type for i in compiled.infolist()}
    assert kinds["pkgx/mod.pyc"] == kinds["pkgx/__init__.pyc"] == zipfile.ZIP_STORED


def test_other_entries_and_the_comment_are_copied_unchanged(archive: Path) -> None:
    with zipfile.ZipFile(archive, "a") as before:
        before.comment = b"built by spark"
    with zipfile.ZipFile(archive) as before:
        entries = {i.filename: (before.read(i), i.date_time) for i in before.infolist()}

    compile_zip(archive)

    with zipfile.ZipFile(archive) as after:
        kept = {i.filename: (after.read(i), i.date_time) for i in after.infolist()}
        assert after.comment == b"built by spark"
    assert {name: kept[name] for name in entries} == entries
    assert set(kept) - set(entries) == {"pkgx/__init__.pyc", "pkgx/mod.pyc"}


def test_a_changed_source_is_imported_from_source_until_compiled_again(archive: Path) -> None:
    # Given a compiled archive whose module then changes, its old bytecode kept beside it
    compile_zip(archive)
    replace_entry(archive, "pkgx/mod.py", b"VALUE = 2\n")

    # Then Python does not use the stale bytecode, and the check says so
    stale = probe(archive)
    assert stale["value"] == 2
    assert stale["compiled"] == [f"{archive}/pkgx/mod.py"]
    found = inspect_zip(archive)
    assert (found.compiled, found.complete) == (1, False)

    # When compiled again, the stale entry is replaced (one entry per name)
    compile_zip(archive)
    with zipfile.ZipFile(archive) as after:
        names = after.namelist()
    assert names.count("pkgx/mod.pyc") == 1
    assert probe(archive) == {"value": 2, "file": f"{archive}/pkgx/mod.pyc", "compiled": []}


def test_bytecode_of_another_python_counts_as_missing(archive: Path) -> None:
    compile_zip(archive)
    with zipfile.ZipFile(archive) as before:
        pyc = before.read("pkgx/mod.pyc")
    other = bytes([pyc[0] ^ 0xFF]) + pyc[1:]  # another magic number: another Python version
    assert other[:4] != importlib.util.MAGIC_NUMBER
    replace_entry(archive, "pkgx/mod.pyc", other)

    assert inspect_zip(archive).compiled == 1
    assert compile_zip(archive).compiled == 2
    with zipfile.ZipFile(archive) as after:
        assert after.read("pkgx/mod.pyc")[:4] == importlib.util.MAGIC_NUMBER


def test_a_compiled_archive_is_not_written_again(archive: Path) -> None:
    compile_zip(archive)
    written = archive.stat()

    found = compile_zip(archive)

    assert found.complete
    assert (archive.stat().st_ino, archive.stat().st_mtime_ns) == (
        written.st_ino,
        written.st_mtime_ns,
    )


def test_a_module_that_does_not_compile_is_left_as_source(tmp_path: Path) -> None:
    path = tmp_path / "archive.zip"
    make_archive(path, extra={"pkgx/broken.py": b"def (:\n"})

    found = compile_zip(path)

    assert (found.modules, found.compiled, found.uncompilable, found.complete) == (3, 2, 1, True)
    with zipfile.ZipFile(path) as after:
        assert "pkgx/broken.pyc" not in after.namelist()
    assert compile_zip(path).uncompilable == 1  # and is not a reason to write again


def test_the_file_mode_is_kept(archive: Path) -> None:
    archive.chmod(0o640)
    compile_zip(archive)
    assert archive.stat().st_mode & 0o777 == 0o640


def test_not_a_zip_archive_is_refused_by_path(tmp_path: Path) -> None:
    path = tmp_path / "pyspark.zip"
    path.write_bytes(b"not a zip")
    with pytest.raises(InvalidSetting, match=r"pyspark\.zip.*not a zip archive"):
        compile_zip(path)
    assert path.read_bytes() == b"not a zip"


def test_a_folder_without_the_archive_is_not_a_spark_home(tmp_path: Path) -> None:
    with pytest.raises(InvalidSetting, match=r"no python/lib/pyspark\.zip in it"):
        zip_of(tmp_path)


def test_spark_home_is_spark_home_else_the_installed_pyspark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPARK_HOME", str(tmp_path))
    assert spark_home() == tmp_path
    monkeypatch.delenv("SPARK_HOME")
    spec = importlib.util.find_spec("pyspark")
    assert spec is not None and spec.origin is not None
    assert spark_home() == Path(spec.origin).parent


def test_the_command_checks_then_compiles(tmp_path: Path) -> None:
    archive = tmp_path / ZIP_IN_SPARK_HOME
    archive.parent.mkdir(parents=True)
    make_archive(archive)
    runner = CliRunner()

    check = runner.invoke(main, ["spark", "compile-zip", "--spark-home", str(tmp_path), "--check"])
    assert check.exit_code == 1, check.output
    assert "in 0 of 2 modules; 2 lack it" in check.output
    assert not inspect_zip(archive).compiled  # a check writes nothing

    compiled = runner.invoke(main, ["spark", "compile-zip", "--spark-home", str(tmp_path)])
    assert compiled.exit_code == 0, compiled.output

    checked = runner.invoke(
        main, ["spark", "compile-zip", "--spark-home", str(tmp_path), "--check", "--json"]
    )
    assert checked.exit_code == 0, checked.output
    report = json.loads(checked.stdout)
    assert (report["modules"], report["compiled"], report["complete"]) == (2, 2, True)


def test_bytecode_names_its_source_by_absolute_path(
    archive: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(archive.parent)
    compile_zip(Path(archive.name))  # a relative path, as --spark-home may be given
    with zipfile.ZipFile(archive) as after:
        code = marshal.loads(after.read("pkgx/mod.pyc")[16:])
    assert code.co_filename == f"{archive.resolve()}/pkgx/mod.py"


SPARK_TESTS = {
    "pkgx/tests/": b"",
    "pkgx/tests/__init__.py": b"",
    "pkgx/tests/test_mod.py": b"import pkgx.mod\n",
    "pkgx/sub/tests/helper.txt": b"data of a test",
    "pkgx/testing/__init__.py": b"HELPER = 3\n",  # public helpers, as pyspark.testing
    "pkgx/tests.py": b"NOT_A_PACKAGE = 1\n",
}


def test_test_entries_are_those_below_a_package_named_tests() -> None:
    assert [name for name in SPARK_TESTS if is_test_entry(name)] == [
        "pkgx/tests/",
        "pkgx/tests/__init__.py",
        "pkgx/tests/test_mod.py",
        "pkgx/sub/tests/helper.txt",
    ]


def test_drop_tests_leaves_the_tests_out_and_compiles_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "archive.zip"
    make_archive(path, extra=SPARK_TESTS)
    assert inspect_zip(path).tests == 4

    found = compile_zip(path, drop_tests=True)

    assert (found.tests, found.modules, found.compiled, found.complete) == (0, 4, 4, True)
    with zipfile.ZipFile(path) as after:
        names = set(after.namelist())
    assert not any(is_test_entry(name) for name in names)
    assert {"pkgx/testing/__init__.pyc", "pkgx/tests.pyc", "pkgx/data.txt"} <= names
    assert probe(path) == {"value": 1, "file": f"{path}/pkgx/mod.pyc", "compiled": []}
    assert inspect_zip(path).tests == 0

    # nothing left to drop or compile: not written again
    written = path.stat()
    compile_zip(path, drop_tests=True)
    assert (path.stat().st_ino, path.stat().st_mtime_ns) == (written.st_ino, written.st_mtime_ns)


def test_without_drop_tests_the_tests_stay_and_are_compiled(tmp_path: Path) -> None:
    path = tmp_path / "archive.zip"
    make_archive(path, extra=SPARK_TESTS)

    found = compile_zip(path)

    assert (found.tests, found.modules, found.compiled) == (4, 6, 6)
    with zipfile.ZipFile(path) as after:
        assert "pkgx/tests/test_mod.pyc" in after.namelist()


def test_the_command_drops_the_tests_and_checks_they_are_gone(tmp_path: Path) -> None:
    archive = tmp_path / ZIP_IN_SPARK_HOME
    archive.parent.mkdir(parents=True)
    make_archive(archive, extra=SPARK_TESTS)
    runner = CliRunner()
    command = ["spark", "compile-zip", "--spark-home", str(tmp_path)]

    compiled = runner.invoke(main, command)
    assert compiled.exit_code == 0, compiled.output
    assert "4 entries of Spark's own tests" in compiled.output
    still = runner.invoke(main, [*command, "--check", "--drop-tests"])
    assert still.exit_code == 1, still.output  # compiled, but the tests are in it

    dropped = runner.invoke(main, [*command, "--drop-tests", "--json"])
    assert dropped.exit_code == 0, dropped.output
    assert json.loads(dropped.stdout)["tests"] == 0
    checked = runner.invoke(main, [*command, "--check", "--drop-tests"])
    assert checked.exit_code == 0, checked.output
