"""A dead-letter topic deleted and recreated between a kill and the restart (to purge it)
must not make the replayed step write its records again (S15).

The run is killed right after its last step's Kafka transactions committed, before Spark's
commit log recorded the batch (the commit-log entry removed, as such a SIGKILL leaves it);
then the table's dead-letter topic is deleted and created again, and the run restarted. The
step markers are records of Tidemark's own compacted topic (docs/adr/0016-durable-step-
markers.md), which the purge does not touch: the replay finds them and writes nothing again.

Run: ``.venv/bin/pytest -q -p no:cacheprovider -m slow tests/e2e/test_durable_markers.py``
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from test_replay_fingerprint import Case

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_a_dead_letter_topic_recreated_before_the_restart_duplicates_nothing_s15(
    kafka: Any, unique_topic: Any, tmp_path: Path
) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    case = Case(kafka, unique_topic, tmp_path)
    case.send(20)
    first = case.run(least=0)
    assert first.returncode == 0, first.stderr[-3000:]
    assert case.written() == Counter(range(20))
    case.forget("commits", case.last_batch())  # killed right after the step's Kafka commit

    admin = AdminClient({**kafka.conf(), "log_level": 3})
    admin.delete_topics([case.dlq])[case.dlq].result(30)
    deadline = time.monotonic() + 60
    while case.dlq in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, "the dead-letter topic was not deleted"
        time.sleep(0.5)
    while True:
        try:
            admin.create_topics([NewTopic(case.dlq, 1, 1)])[case.dlq].result(30)
            break
        except Exception:  # noqa: BLE001 - the deletion may still be under way
            assert time.monotonic() < deadline, "the dead-letter topic was not created again"
            time.sleep(0.5)

    again = case.run(least=0)
    assert again.returncode == 0, again.stderr[-3000:]
    assert case.written() == Counter(range(20)), "every record once"
