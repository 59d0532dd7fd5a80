"""Operating a keyspace of queues from outside the engine: Prometheus gauges and serving."""
