"""``bdq serve``: an SQS-compatible HTTP service over the queue (docs/service.md).

Built on the public client (``QueueClient``, ``Queue``), one module per concept:
``protocol`` (AWS JSON 1.0 and SQS's errors), ``sigv4`` (signatures), ``accounts``
(access keys), ``queue_urls`` (an account's queues), ``queue_attributes`` and
``message_attributes`` (SQS's attributes on the queue's settings and headers),
``queues`` (handles and error translation), ``queue_actions``, ``message_actions``
and ``long_poll`` (the actions), ``app`` (the ASGI app) and ``server`` (uvicorn).
Starlette and uvicorn come with the ``serve`` extra.
"""
