"""Pipeline jobs of spark-queue, each a script with an argparse main (run it with ``--help``).

* ``pipeline.py``: orders -> validate and enrich -> shipments / orders-rejected,
  a Structured Streaming query from ``format("bdq")`` to ``format("bdq")``.
* ``order_producer.py``: sends sample JSON orders to ``orders`` at a given rate.
* ``demo.py``: what ``make run`` runs: seeds sample orders, runs the pipeline
  once (``availableNow``) and prints a summary.

Each runs as ``python jobs/<job>.py`` or ``spark-submit jobs/<job>.py`` from a
checkout, and imports as ``jobs.<job>`` (the tests do). Settings come from
flags, then the ``BDQ_*`` environment, then ``conf/pipeline.toml``.
"""
