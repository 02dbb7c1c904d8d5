"""``tidemark demo --program`` on a program of two tables (pipelines/orders_trades.sql): the
installed command, a real broker and local Spark, records generated for both tables from
their columns. Each append view (the merge and both joins) writes records (the merge's count
per five minutes completes no window in the demo's seconds), one dead letter is shown, the
summary's checks hold, and the console shows Tidemark's lines only."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from test_demo_console import console_problems

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
TIDEMARK = ROOT / ".venv" / "bin" / "tidemark"
VIEWS = {
    "activity": "orders_trades.activity",
    "order_fills": "orders_trades.by_order",
    "trade_orders": "orders_trades.by_trade",
    "order_trade_outer": "orders_trades.outer",
}


@pytest.mark.slow  # ~1.5 min; CI runs the demo console's checks
def test_the_demo_runs_a_program_of_two_tables_and_its_checks_hold(tmp_path: Path) -> None:
    assert TIDEMARK.is_file(), "the project's venv: make setup"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TIDEMARK_SPARK", "PYSPARK"))}
    env.update(NO_COLOR="1", TERM="dumb", COLUMNS="200")
    done = subprocess.run(
        [
            str(TIDEMARK), "demo", "--program", str(ROOT / "pipelines" / "orders_trades.sql"),
            "--duration-seconds", "12", "--rate", "100",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=420,
        check=False,
    )
    output = done.stdout
    assert done.returncode == 0, output
    assert console_problems(output) == [], output
    assert "program orders_trades.sql: 2 table(s), 5 view(s)" in output
    assert re.search(r"step +\d+ +(orders|trades) +in +\d+", output), output
    for view, topic in VIEWS.items():
        shown = rf"{re.escape(topic)}: view {view} \(append, avro\), (\d+) records"
        found = re.search(shown, output)
        assert found and int(found[1]) > 0, (view, output)
    # The merge's rows, decoded: a time, a ticker, an amount and which table it came from.
    assert re.search(
        r"│ \d{4}-\d\d-\d\d \d\d:\d\d:\d\d │ +(ORCL|YHOO|MSFT|IBM) │ +\d+ │ +(order|trade) │",
        output,
    ), output
    assert re.search(r"│ tidemark\.error\.reason +│ (late|malformed) ", output), output
    produced = {
        name: int(n) for name, n in re.findall(r"│ (orders|trades) produced +│ +(\d+) │", output)
    }
    assert set(produced) == {"orders", "trades"} and min(produced.values()) > 0, output
    checks = re.findall(r"^\s+(ok |FAIL) (.+)$", output, re.MULTILINE)
    assert len(checks) == 4 and all(status == "ok " for status, _ in checks), output
