"""tidelog: a replicated, Kafka-compatible log broker and cluster testbed."""

__version__ = "0.1.0"
