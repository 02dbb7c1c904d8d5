"""The operators: how each kind of view builds its part of a table's Spark query."""
