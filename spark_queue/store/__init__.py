"""Every CQL statement of spark-queue, one module per table family, behind typed calls.

Nothing above this package writes CQL: the engine, the client and the tools call
these modules. The schema is ``schema.cql`` (package data).
"""
