"""The progress sink every benchmark reports to: a callable taking one short status line.

A command line shows the lines on a status line; a library caller may log them
or drop them.
"""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[str], None]
