"""Which queues a command looks at: glob patterns of queue names (``--queue 'orders-*'``)."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable

__all__ = ["matches"]


def matches(name: str, patterns: Iterable[str] | None) -> bool:
    """True when ``name`` matches one of the glob ``patterns`` (``orders-*``), or there are none."""
    patterns = list(patterns or ())
    return not patterns or any(fnmatch.fnmatchcase(name, p) for p in patterns)
