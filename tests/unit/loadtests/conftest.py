"""The load-test harness is not an installed package (pyproject installs ``app`` only): put
the project root on ``sys.path`` so these tests import ``loadtests`` as ``python -m`` does."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[3])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
