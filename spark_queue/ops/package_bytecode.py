"""Whether spark-queue's own modules have bytecode that Python would use.

pip compiles a wheel's modules when it installs them. A checkout installed in
editable mode (``make venv``) gets bytecode only from Python writing it at a
module's first import, which ``PYTHONDONTWRITEBYTECODE=1`` (set in many container
images) turns off: every process then compiles each spark-queue module it
imports. Spark starts such processes for every streaming query (its source
runner, and the planner's Python processes on the driver), so a drain of
100,000 messages took 0.1-0.4 s longer without the bytecode (docs/spark.md,
"Python start-up"). ``make bytecode`` (``python -m compileall``) writes it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

#: The package's own folder.
PACKAGE_ROOT = Path(__file__).resolve().parent.parent

_HEADER = 16  # magic (4), flags (4), then a source hash (8) or mtime (4) and size (4)


def lacking_bytecode(root: Path = PACKAGE_ROOT) -> list[Path]:
    """The modules under ``root`` that this Python would compile when importing them."""
    return [path for path in sorted(root.rglob("*.py")) if not _current(path)]


def _current(source: Path) -> bool:
    """Whether the cached ``.pyc`` of ``source`` passes the checks of Python's source loader."""
    cached = Path(importlib.util.cache_from_source(str(source)))
    try:
        with cached.open("rb") as f:
            header = f.read(_HEADER)
    except OSError:
        return False
    if len(header) < _HEADER or header[:4] != importlib.util.MAGIC_NUMBER:
        return False
    flags = int.from_bytes(header[4:8], "little")
    if flags & 0b01:  # hash-based (PEP 552); bit 1: the hash is checked
        return not flags & 0b10 or header[8:16] == importlib.util.source_hash(source.read_bytes())
    stat = source.stat()
    return (
        int.from_bytes(header[8:12], "little") == int(stat.st_mtime) & 0xFFFFFFFF
        and int.from_bytes(header[12:16], "little") == stat.st_size & 0xFFFFFFFF
    )
