"""Observability: Prometheus metrics (SPEC part M), health endpoints and structured logs.

Used by the runtime, never the reverse (STYLE habit 1). :mod:`.metrics` defines every metric;
:mod:`.listener` feeds it from Spark's progress events; :mod:`.server` serves it with the
Kubernetes probes; :mod:`.logging` configures structlog and logs late rows per SPEC S6.
The listener module imports pyspark, so it is not imported here.
"""

from app.observability.metrics import TidemarkMetrics

__all__ = ["TidemarkMetrics"]
