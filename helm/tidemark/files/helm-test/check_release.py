"""`helm test`: the release answers /readyz with 200 and serves a metric on /metrics.

Run by the chart's test pod with the image's python (no curl there), and by
tests/deploy/test_helm_chart.py against Tidemark's metrics server. Standard library only.
Environment: TIDEMARK_URL (the metrics endpoint's base URL), TIDEMARK_METRIC (a metric name
that must have a sample), TIDEMARK_WAIT_SECONDS (how long /readyz may take to answer 200).
Exit code 0 and one line on success; 1 and the reason otherwise.
"""

import os
import sys
import time
import urllib.error
import urllib.request

base = os.environ["TIDEMARK_URL"].rstrip("/")
metric = os.environ.get("TIDEMARK_METRIC", "tidemark_build_info")
deadline = time.monotonic() + float(os.environ.get("TIDEMARK_WAIT_SECONDS", "60"))


def get(path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(base + path, timeout=10) as response:  # noqa: S310
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError as error:
        return 0, str(error)


while True:
    status, body = get("/readyz")
    if status == 200 or time.monotonic() >= deadline:
        break
    time.sleep(2)
if status != 200:
    sys.exit(f"FAIL {base}/readyz: {status or 'no answer'}: {body.strip()}")
ready = body.strip()
status, body = get("/metrics")
samples = [line for line in body.splitlines()
           if line.startswith((metric + "{", metric + " "))]
if status != 200 or not samples:
    sys.exit(f"FAIL {base}/metrics: {status or 'no answer'}: no sample of {metric}")
print(f"OK {base}: ready ({ready}); {samples[0]}")
