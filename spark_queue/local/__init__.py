"""Local Cassandra nodes for development and tests, with their certificates and CQL helpers.

Nothing here is used when ``BDQ_CASSANDRA_HOSTS`` points at a cluster of your own.
"""
