"""Old against new commit, alternating: ``python -m loadtests.alternate --old REV``.

Whether a change lowered Tidemark's throughput cannot be read from two runs an hour apart on a
shared machine: its speed moves more than most changes do (docs/performance.md, "Throughput
after the restructuring"). This runs each workload's Tidemark side (``loadtests.bench --sides
tidemark``) from a ``git worktree`` of each commit in turn, old then new, for ``--rounds``
rounds, and compares the medians of each commit's steady events/s and CPU seconds per million
events. Each commit runs its own harness and code (its worktree on ``PYTHONPATH``, as the
working directory), with this checkout's interpreter and ``.cache`` (the local broker's jars).

Writes ``var/alternate/<stamp>/summary.json`` and the bench results beside it, and prints one
line per workload: ``workload  old median  new median  new/old  (CPU s/M old, new)``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _worktree(rev: str, base: Path) -> tuple[str, Path]:
    """A detached worktree of ``rev`` under ``base`` (made once), with this checkout's
    ``.cache`` linked in; the commit's full hash and the worktree's path."""
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", rev], check=True,
                            capture_output=True, text=True).stdout.strip()
    path = base / commit[:12]
    if not path.exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path),
                        commit], check=True, capture_output=True)
        (path / ".cache").symlink_to(ROOT / ".cache")
    return commit, path


def _events(spec: list[str]) -> dict[str, int]:
    """``--events d=1000000 e=1000000``: events per workload (the others: bench's default)."""
    found: dict[str, int] = {}
    for item in spec:
        workload, _, count = item.partition("=")
        if not workload or not count.isdigit():
            raise SystemExit(f"--events {item}: write workload=count, e.g. d=1000000")
        found[workload] = int(count)
    return found


def _run(path: Path, workload: str, events: int | None, out: Path) -> dict[str, Any]:
    """One Tidemark-side bench run from the worktree at ``path``; its Tidemark run."""
    out.mkdir(parents=True, exist_ok=True)
    before = set(out.glob("*.json"))
    command = [sys.executable, "-m", "loadtests.bench", "--workload", workload,
               "--sides", "tidemark", "--out", str(out)]
    if events is not None:
        command += ["--events", str(events)]
    env = {**os.environ, "PYTHONPATH": str(path)}
    subprocess.run(command, cwd=path, env=env, check=True)
    (result,) = set(out.glob("*.json")) - before
    runs = json.loads(result.read_text())["throughput"][0]["runs"]
    run: dict[str, Any] = next(r for r in runs if r["side"] == "tidemark")
    run["result"] = str(result)
    return run


def _steady(run: dict[str, Any]) -> float:
    """A run's steady events/s; its whole-run rate when it had too few steps for one (as
    bench's own summary reads it)."""
    return float(run.get("steady_events_per_s") or run["events_per_s"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Tidemark at two commits, alternating")
    parser.add_argument("--old", required=True, help="the commit before the change")
    parser.add_argument("--new", default="HEAD", help="the commit with it (default HEAD)")
    parser.add_argument("--workloads", nargs="+", default=["a", "b", "c", "d", "e"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--events", nargs="*", default=[],
                        help="workload=count for workloads not run at bench's 4M")
    args = parser.parse_args(argv)
    events = _events(args.events)
    out = ROOT / "var" / "alternate" / time.strftime("%Y%m%dT%H%M%S")
    trees = ROOT / "var" / "alternate" / "trees"
    trees.mkdir(parents=True, exist_ok=True)
    sides = {"old": _worktree(args.old, trees), "new": _worktree(args.new, trees)}
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        w: {"old": [], "new": []} for w in args.workloads}
    for round_ in range(1, args.rounds + 1):
        for workload in args.workloads:
            for side, (commit, path) in sides.items():
                print(f"round {round_}, ({workload}), {side} {commit[:12]}", flush=True)
                run = _run(path, workload, events.get(workload), out / side)
                runs[workload][side].append(run)
                print(f"  steady {_steady(run):,.0f} events/s, "
                      f"{run['cpu_s_per_m']:.1f} CPU s/M", flush=True)
    summary: dict[str, Any] = {"old": sides["old"][0], "new": sides["new"][0],
                               "rounds": args.rounds, "workloads": {}}
    for workload, by_side in runs.items():
        old, new = (statistics.median(map(_steady, by_side[s])) for s in ("old", "new"))
        cpu_old, cpu_new = (statistics.median(r["cpu_s_per_m"] for r in by_side[s])
                            for s in ("old", "new"))
        summary["workloads"][workload] = {
            "events": events.get(workload, 4_000_000),
            "steady_events_per_s": {s: [_steady(r) for r in by_side[s]]
                                    for s in ("old", "new")},
            "cpu_s_per_m": {s: [r["cpu_s_per_m"] for r in by_side[s]] for s in ("old", "new")},
            "median_ratio": new / old,
            "results": {s: [r["result"] for r in by_side[s]] for s in ("old", "new")},
        }
        print(f"({workload})  {old:,.0f}  {new:,.0f}  {new / old:.2f}  "
              f"(CPU s/M {cpu_old:.1f}, {cpu_new:.1f})")
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(f"summary: {out / 'summary.json'}")


if __name__ == "__main__":
    main()
