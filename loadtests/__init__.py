"""Load tests: a generator, a latency probe, workloads, and the side-by-side bench
(Tidemark against a plain Spark Structured Streaming job on the same topic). Not unit tests:
nothing here is timed in CI; ``tests/e2e/test_bench_smoke.py`` only checks the harness runs."""
