"""``python -m spark_queue.cli``: the ``bdq`` command without its console script."""

from spark_queue.cli import main

main(prog_name="bdq")
