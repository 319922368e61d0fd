"""Tiercel: a Kafka-wire-compatible broker. The card's top-level directories are its subpackages."""
