"""Python bytecode inside Spark's ``pyspark.zip``, so Spark's Python processes start faster.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on the ``PYTHONPATH`` of
every Python process it starts: the executors' worker daemon and, on the driver,
the ``python_streaming_source_runner`` of every streaming query that reads a
Python data source, started afresh for each query. Those processes import
pyspark from the archive even where pyspark is installed beside it, and Python
caches no bytecode for a module imported from an archive. Spark ships the
archive with sources only, so each such process compiles the pyspark modules it
imports. On a 2-core machine a source runner's imports took 0.73-0.98 s from the
archive as shipped and 0.29-0.36 s from one with bytecode, and a query's time
outside its triggers shrank by 0.24-0.33 s (docs/benchmarks.md).

``compile_zip`` adds a ``.pyc`` beside each ``.py`` of the archive, where
``zipimport`` looks for one. The bytecode is checked-hash (PEP 552): Python uses
it only when its magic number is the running interpreter's and the hash of the
``.py`` beside it still matches, and compiles the source as before otherwise
(another Python version on a node, a source changed in place). Entries other
than the replaced ``.pyc`` files are copied unchanged, and the archive is
replaced in one rename, so no process ever reads half an archive. The bytecode
is stored uncompressed, which zipimport reads without inflating it: a process
that imports the source runner took 0.26-0.27 s against 0.28-0.29 s with it
deflated (7 runs each, twice), for an archive of 28 MB instead of 11. A Python
process already running from the old archive keeps its table of contents and
reopens the archive by path for each later import, where it now finds other
offsets: its next import from it fails. Compile while no Spark application
runs on the node, as when installing Spark.

``drop_tests`` also leaves Spark's own unit tests (every entry below a package
named ``tests``; ``pyspark.testing``, the public helpers, stays) out of the
archive: 1,983 of pyspark 4.3.0's 2,771 entries once compiled, and no other
module of it imports them. On Python 3.11 each Spark Python process re-reads
the archive's whole directory once per package it has imported from it, when
pyspark's start calls ``importlib.invalidate_caches()`` (CPython gh-103200 made
this lazy in 3.12): 17 packages of 2,771 entries in a source runner. Without
the tests a streaming query spent 0.67-0.71 s outside its triggers against
0.81-0.88 s (docs/benchmarks.md). The installed package keeps its tests; a
process Spark starts can no longer import ``pyspark.*.tests`` from the archive.
"""

from __future__ import annotations

import importlib.util
import marshal
import os
import tempfile
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path

from spark_queue.errors import InvalidSetting

#: Where a Spark installation keeps the archive, below its home.
ZIP_IN_SPARK_HOME = Path("python", "lib", "pyspark.zip")

# PEP 552 flags: bit 0 says the .pyc is hash-based, bit 1 that Python checks the hash.
_CHECKED_HASH = 0b11
_HEADER = 16  # magic (4), flags (4), source hash (8)


@dataclass(frozen=True)
class ZipBytecode:
    """How much of an archive's Python has bytecode the running interpreter would use.

    Attributes:
        path: The archive.
        modules: Its ``.py`` entries.
        compiled: Those with a ``.pyc`` beside them for this Python and this source.
        uncompilable: Those this Python cannot compile (imported from source, or failing, as
            before).
        size: The archive's size in bytes.
        tests: Its entries of Spark's own unit tests (``drop_tests`` leaves them out).
    """

    path: Path
    modules: int
    compiled: int
    uncompilable: int
    size: int
    tests: int = 0

    @property
    def lacking(self) -> int:
        """Modules this Python could compile that have no bytecode it would use."""
        return self.modules - self.compiled - self.uncompilable

    @property
    def complete(self) -> bool:
        """Every module this Python can compile has bytecode it would use."""
        return not self.lacking


def spark_home() -> Path:
    """The Spark installation Spark's launcher would use: ``SPARK_HOME``, else pyspark's own.

    Raises:
        InvalidSetting: Neither is there.
    """
    home = os.environ.get("SPARK_HOME")
    if home:
        return Path(home)
    spec = importlib.util.find_spec("pyspark")  # finds the package without importing it
    if spec is None or spec.origin is None:
        raise InvalidSetting(
            "no Spark installation: SPARK_HOME is unset and pyspark is not installed;"
            " set SPARK_HOME (or --spark-home) to a Spark installation"
        )
    return Path(spec.origin).parent


def zip_of(home: Path) -> Path:
    """``home``'s ``pyspark.zip``.

    Raises:
        InvalidSetting: ``home`` has none.
    """
    path = home / ZIP_IN_SPARK_HOME
    if not path.is_file():
        raise InvalidSetting(
            f"Spark home {str(home)!r}: no {ZIP_IN_SPARK_HOME} in it; it must be a Spark"
            " installation (SPARK_HOME, or the pip-installed pyspark directory)"
        )
    return path


def inspect_zip(path: Path) -> ZipBytecode:
    """Count the modules of ``path`` whose bytecode this Python would use.

    Raises:
        InvalidSetting: ``path`` is not a zip archive.
    """
    with _open(path) as archive:
        modules, compiled, missing = _scan(path, archive, left_out=frozenset())
        tests = len(_test_entries(archive))
    uncompilable = sum(1 for bytecode in missing.values() if bytecode is None)
    return ZipBytecode(path, modules, compiled, uncompilable, path.stat().st_size, tests)


def compile_zip(path: Path, *, drop_tests: bool = False) -> ZipBytecode:
    """Add this Python's checked-hash bytecode beside every ``.py`` of ``path``, in place.

    With ``drop_tests``, also leave out every entry of Spark's own unit tests
    (``is_test_entry``). Writes nothing when every module that compiles (and is kept) has
    current bytecode already and no test is left to drop.

    Raises:
        InvalidSetting: ``path`` is not a zip archive, or its folder is not writable.
    """
    with _open(path) as archive:
        tests = _test_entries(archive)
        left_out = tests if drop_tests else frozenset()
        modules, compiled, missing = _scan(path, archive, left_out=left_out)
        added = {name + "c": code for name, code in missing.items() if code is not None}
        if added or left_out:
            _rewrite(path, archive, added, left_out)
    uncompilable = len(missing) - len(added)
    kept_tests = len(tests - left_out)
    size = path.stat().st_size
    return ZipBytecode(path, modules, compiled + len(added), uncompilable, size, kept_tests)


def is_test_entry(name: str) -> bool:
    """Whether archive entry ``name`` is in a package named ``tests`` (Spark's own unit tests)."""
    return "tests" in name.split("/")[:-1]


def _test_entries(archive: zipfile.ZipFile) -> frozenset[str]:
    return frozenset(name for name in archive.namelist() if is_test_entry(name))


def _scan(
    path: Path, archive: zipfile.ZipFile, *, left_out: frozenset[str]
) -> tuple[int, int, dict[str, bytes | None]]:
    """``(modules, compiled, missing)``: new bytecode by ``.py`` name, None where none compiles.

    Modules named in ``left_out`` (which the rewrite drops) are neither counted nor compiled.
    """
    entries = {info.filename: info for info in archive.infolist()}
    modules = compiled = 0
    missing: dict[str, bytes | None] = {}
    for name, info in entries.items():
        if not name.endswith(".py") or name in left_out:
            continue
        modules += 1
        source = archive.read(info)
        if name + "c" in entries and _current(archive.read(entries[name + "c"]), source):
            compiled += 1
        else:
            # the name a traceback shows: where zipimport would have compiled it from
            missing[name] = _bytecode(source, f"{path.resolve()}/{name}")
    return modules, compiled, missing


def _rewrite(
    path: Path, archive: zipfile.ZipFile, added: dict[str, bytes], left_out: frozenset[str]
) -> None:
    """Replace ``path`` by a copy of ``archive`` with the ``added`` entries, in one rename.

    The copy leaves the entries named in ``left_out`` out.
    """
    try:
        handle, temporary = tempfile.mkstemp(prefix=".pyspark-", suffix=".zip", dir=path.parent)
    except OSError as e:
        raise InvalidSetting(
            f"{str(path)!r}: cannot write beside it ({e.strerror}); run as the user that"
            " owns the Spark installation"
        ) from None
    try:
        with os.fdopen(handle, "wb") as out, zipfile.ZipFile(out, "w") as copy:
            copy.comment = archive.comment
            for info in archive.infolist():
                if info.filename in added or info.filename in left_out:
                    continue  # stale bytecode, replaced beside its source; or left out
                copy.writestr(info, archive.read(info))
                bytecode = added.get(info.filename + "c")
                if bytecode is not None:
                    entry = zipfile.ZipInfo(info.filename + "c", info.date_time)
                    entry.external_attr = info.external_attr
                    copy.writestr(entry, bytecode, compress_type=zipfile.ZIP_STORED)
        os.chmod(temporary, path.stat().st_mode & 0o7777)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _open(path: Path) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        raise InvalidSetting(f"{str(path)!r}: not a zip archive") from None


def _bytecode(source: bytes, filename: str) -> bytes | None:
    """A checked-hash ``.pyc`` of ``source``; None when this Python cannot compile it."""
    try:
        with warnings.catch_warnings():
            # pyspark's own tests carry literals that Python warns about when compiling
            warnings.simplefilter("ignore")
            code = compile(source, filename, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return None
    header = (
        importlib.util.MAGIC_NUMBER
        + _CHECKED_HASH.to_bytes(4, "little")
        + importlib.util.source_hash(source)
    )
    return header + marshal.dumps(code)


def _current(bytecode: bytes, source: bytes) -> bool:
    """Whether this Python would use ``bytecode`` for ``source``, as zipimport decides."""
    return (
        len(bytecode) > _HEADER
        and bytecode[:4] == importlib.util.MAGIC_NUMBER
        and int.from_bytes(bytecode[4:8], "little") == _CHECKED_HASH
        and bytecode[8:16] == importlib.util.source_hash(source)
    )
