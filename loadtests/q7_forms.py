"""NEXMark Q7 in its two forms over one generated input (SPEC S16; the paper's listings 2
and 3): ``pipelines/nexmark_q7.sql`` runs the ARG_MAX view ``max_bid`` and the join view
``max_bid_join`` (the bids joined with each window's maximum) in one query, over ``--events``
bids of workload (c)'s generator (10-minute windows, 5% out of order, 1% late), and the
script compares what they wrote, window by window:

- both write the same windows, at the same maximum price;
- where one bid holds a window's top price, both write that bid: the same row;
- where several bids tie for it (prices are drawn from 1-999, so a window of 300,000 bids
  has many at 999), the join writes every one of them and the ARG_MAX form the earliest, which
  must be among them.

    .venv/bin/python loadtests/q7_forms.py --events 1000000

Uses ``KAFKA_BOOTSTRAP_SERVERS`` when set, else starts the local broker. The figures are
printed as JSON and written to ``--out-json`` (``var/loadtests/q7-forms.json``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# Run as a script, Python puts loadtests/ first on sys.path, where other load tests' modules
# (profile.py) shadow the standard library: put the project root there instead.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path[0] = str(ROOT)
else:
    sys.path.insert(0, str(ROOT))

from app.config import Settings  # noqa: E402
from app.connectors.avro_codec import AvroCodec  # noqa: E402
from app.connectors.topic_reader import read_topic  # noqa: E402
from app.program.compile import compile_program  # noqa: E402
from app.runtime.service import Service  # noqa: E402
from loadtests.bench import broker as local_or_given_broker  # noqa: E402
from loadtests.bench import shape_of  # noqa: E402
from loadtests.generator import produce  # noqa: E402

Row = tuple[int, int, str]  # bidtime, price, item


def program_text(topics: dict[str, str]) -> str:
    """The shipped program with its topics renamed and the bid schema inline (the table's
    own, which the generator writes)."""
    text = (ROOT / "pipelines" / "nexmark_q7.sql").read_text()
    text = re.sub(r",\s*'schema'\s*=\s*'schemas/bid.avsc'", "", text)
    for shipped, topic in topics.items():
        text = text.replace(f"'{shipped}'", f"'{topic}'")
    return text


def written(conf: dict[str, str], circuit: Any, view: str) -> dict[tuple[int, int], list[Row]]:
    """The view's rows by window (wstart, wend)."""
    output = circuit.view(view).output
    codec = AvroCodec(output.value_schema)
    rows: dict[tuple[int, int], list[Row]] = defaultdict(list)
    for message in read_topic(conf, output.topic):
        value = codec.decode(message.value())
        rows[(value["wstart"], value["wend"])].append(
            (value["bidtime"], value["price"], value["item"])
        )
    return rows


def compare(
    arg_max: dict[tuple[int, int], list[Row]], joined: dict[tuple[int, int], list[Row]]
) -> dict[str, Any]:
    mismatches: list[str] = []
    if set(arg_max) != set(joined):
        mismatches.append(f"windows differ: {sorted(set(arg_max) ^ set(joined))[:5]}")
    single = tied = 0
    for window in sorted(set(arg_max) & set(joined)):
        (top,) = arg_max[window]
        rows = joined[window]
        if len(set(rows)) != len(rows):
            mismatches.append(f"{window}: the join wrote a bid twice")
        if any(price != top[1] for _, price, _ in rows):
            mismatches.append(f"{window}: the join's price is not the window's maximum")
        if top not in rows:
            mismatches.append(f"{window}: the ARG_MAX bid {top} is not among the join's")
        if len(rows) == 1:
            single += 1
        else:
            tied += 1
    return {
        "windows": len(arg_max),
        "arg_max_rows": sum(len(r) for r in arg_max.values()),
        "join_rows": sum(len(r) for r in joined.values()),
        "windows_with_one_top_bid": single,
        "windows_with_tied_top_bids": tied,
        "mismatches": mismatches,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--out-json", type=Path, default=ROOT / "var/loadtests/q7-forms.json")
    args = parser.parse_args()
    bootstrap, broker = local_or_given_broker()
    conf = {"bootstrap.servers": bootstrap}
    try:
        from confluent_kafka.admin import AdminClient, NewTopic

        tag = f"q7forms.{int(time.time())}"
        topics = {s: f"{tag}.{s.split('.', 1)[1]}" for s in
                  ("nexmark.bids", "nexmark.q7", "nexmark.q7_join")}
        admin = AdminClient({**conf, "log_level": 3})
        bids = topics["nexmark.bids"]
        admin.create_topics([NewTopic(bids, args.partitions, 1)])[bids].result(30)
        work = Path(tempfile.mkdtemp(prefix="tidemark-q7-forms-"))
        path = work / "nexmark_q7.sql"
        path.write_text(program_text(topics))
        circuit = compile_program(path)
        table = circuit.table("bid")
        shape = shape_of("c", table.avro_schema)
        produced = produce(conf, bids, shape, args.events)
        print(json.dumps({"produced": args.events, "seconds": round(produced, 1)}), flush=True)
        settings = Settings(bootstrap_servers=bootstrap, checkpoint=work / "ck",
                            shuffle_partitions=args.partitions, spark_log="console")
        service = Service(circuit, settings)
        started = time.monotonic()
        service.start(once=True)
        service.wait()
        ran = time.monotonic() - started
        service.stop()
        figures = compare(written(conf, circuit, "max_bid"), written(conf, circuit, "max_bid_join"))
        figures |= {"events": args.events, "run_seconds": round(ran, 1)}
        args.out_json.parent.mkdir(parents=True, exist_ok=True)
        args.out_json.write_text(json.dumps(figures, indent=1))
        print(json.dumps(figures), flush=True)
        if figures["mismatches"]:
            raise SystemExit(1)
    finally:
        if broker is not None:
            broker.cleanup()


if __name__ == "__main__":
    main()
