"""RemoteStorageManager: where rolled segments go (Kafka's
``org.apache.kafka.server.log.remote.storage.RemoteStorageManager``), its object layout
and its implementations."""
