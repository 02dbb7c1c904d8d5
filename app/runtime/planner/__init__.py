"""The planner: what runs where, decided from the circuit IR before Spark starts."""
