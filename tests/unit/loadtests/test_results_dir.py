"""Where a benchmark run writes (loadtests.bench): outside the tracked tree unless told."""

from __future__ import annotations

from pathlib import Path

from loadtests.bench import RESULTS, ROOT, parse_args


def test_a_run_writes_under_the_git_ignored_var_directory_by_default() -> None:
    args = parse_args(["--workload", "b"])
    assert args.out == RESULTS and args.plot is None  # the plot goes beside the result
    assert RESULTS.relative_to(ROOT).parts[0] == "var"
    assert "/var/" in (ROOT / ".gitignore").read_text().split()


def test_out_and_plot_choose_other_places(tmp_path: Path) -> None:
    args = parse_args(
        ["--workload", "a", "--out", str(tmp_path), "--plot", str(tmp_path / "p.png")]
    )
    assert args.out == tmp_path and args.plot == tmp_path / "p.png"
