"""Property tests share the hand-built circuit helpers of tests/unit/circuit."""

from __future__ import annotations

import sys
from pathlib import Path

_BUILDERS = Path(__file__).resolve().parents[1] / "unit" / "circuit"
if str(_BUILDERS) not in sys.path:
    sys.path.insert(0, str(_BUILDERS))
