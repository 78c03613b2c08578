"""The transactional Kafka sink (``sink``): its options, pre-seal checks, producer,
transactional ids, epoch markers, topics, Avro values, lineage headers and read-back, one
module each."""
