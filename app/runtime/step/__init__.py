"""The step protocol: what each Spark micro-batch (one step t, SPEC S1) does, in order."""
