"""The relay of ``spark_queue.bench.faults_relay``, runnable by path from the tests."""

from __future__ import annotations

import sys

from spark_queue.bench.faults_relay import main

if __name__ == "__main__":
    sys.exit(main())
