"""Benchmarks the user can run (``bdq bench ...``), after the BlueDove paper."""
