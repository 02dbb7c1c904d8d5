"""Tidemark: streaming SQL over Kafka with LATENESS, waterlines and dead letters, on Spark."""

__version__ = "0.1.0"
