"""The queue engine: what ``Queue`` is made of, one concept per module.

Nothing here is public API: users import ``spark_queue`` (``QueueClient``,
``Queue``, ``Producer`` and the values and errors). The engine sits between
``client``/``queue`` above and ``store`` below; docs/architecture.md maps it.
"""
