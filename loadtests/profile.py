"""Profile Tidemark's hot path with py-spy over the whole process tree (driver and Python
workers): ``python -m loadtests.profile --workload a --events 50000``. Writes py-spy's raw
(collapsed) stacks to ``var/loadtests/profile-<w>.txt`` (git-ignored; ``--out`` elsewhere)
and prints the top frames by self time, grouped by the stage they belong to (consume, decode,
gate, Arrow build, encode, produce)."""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

from loadtests.bench import RESULTS, ROOT, broker, create_topic, input_schema, shape_of
from loadtests.generator import produce


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workload", default="a")
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument(
        "--out", type=Path, default=None, help="default: var/loadtests/profile-<w>.txt"
    )
    args = parser.parse_args()
    bootstrap, local = broker()
    out = args.out or RESULTS / f"profile-{args.workload}.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        topic = f"profile.{uuid.uuid4().hex[:6]}"
        create_topic(bootstrap, topic, 2)
        create_topic(bootstrap, topic + ".out", 2)
        schema = input_schema(args.workload)
        produce({"bootstrap.servers": bootstrap}, topic, shape_of(args.workload, schema),
                args.events)
        spec = {
            "side": "tidemark", "workload": args.workload, "bootstrap": bootstrap,
            "topic": topic, "out": topic + ".out", "master": "local[2]",
            "shuffle_partitions": 2, "max_records_per_step": 200_000,
            "work_dir": tempfile.mkdtemp(),
        }
        pyspy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or "py-spy"
        subprocess.run(
            [pyspy, "record", "--subprocesses", "--format", "raw", "--rate", "50",
             "-o", str(out), "--", sys.executable, "-m", "loadtests.side", json.dumps(spec)],
            cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
    finally:
        if local is not None:
            local.cleanup()
    self_time: collections.Counter[str] = collections.Counter()
    for line in out.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        self_time[stack.split(";")[-1]] += int(n)
    total = sum(self_time.values())
    for frame, n in self_time.most_common(25):
        print(f"{100 * n / total:5.1f}%  {frame}")


if __name__ == "__main__":
    main()
