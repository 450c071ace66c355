"""The Kafka shell: thin modules that move bytes between Kafka and the pure core.

- :mod:`~reliable_kafka.kafka.factory`: where every client comes from (confluent-kafka, or an injected
  :class:`~reliable_kafka.kafka.factory.KafkaClients` such as the in-memory Kafka);
- :mod:`~reliable_kafka.kafka.clients`: producers and consumers with the library's settings;
- :mod:`~reliable_kafka.kafka.produce`: producing a tuple, waiting for room, flushing;
- :mod:`~reliable_kafka.kafka.ack_sender`: packing ack entries into ack-topic records;
- :mod:`~reliable_kafka.kafka.parking`: the quarantine and dead-letter writes that never raise;
- :mod:`~reliable_kafka.kafka.outcomes`: reading the outcomes addressed to a spout;
- :mod:`~reliable_kafka.kafka.deadline`: a hard deadline around a client call that can hang;
- :mod:`~reliable_kafka.kafka.commit_wait`: a due commit that waits for delivery on later rounds
  instead of blocking in a flush (bolts and ackers).
"""

__all__: list[str] = []
