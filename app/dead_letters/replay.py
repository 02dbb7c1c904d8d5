"""``tidemark dead-letters replay``: re-produce a selection of dead letters to a topic.

Each selected record goes to the target topic with its key, value, Kafka timestamp (its
source record's, which the dead letter kept) and every header (the original ones and the S6
ones), plus ``tidemark.replayed-from`` = ``<dead-letter topic>/<partition>/<offset>``. A dead
letter that already carries ``tidemark.replayed-from`` (a replayed record refused again) is
left out unless the selection includes replays (``--include-replayed``), so a full replay
does not send the same records round a loop. Each is recorded in the ledger topic
``<dead-letter topic>.replays`` (compacted, one partition) under the key
``<dead-letter topic>/<partition>/<offset>><target>``; a record the ledger holds for the
target is not written again unless ``force`` (docs/adr/0012-dead-letter-replay-ledger.md).

Guarantee: the records and their ledger entries are written in Kafka transactions of
``chunk`` records each, by the transactional id ``tidemark-replay-<dead-letter topic>``. A
record is in the target (for read_committed consumers, as Tidemark's own tables read) if and
only if the ledger records it: a crash or a failure mid-replay loses the open transaction
whole, the next replay of the topic aborts it (``init_transactions`` fences the crashed
writer) before it reads the ledger, and so replays exactly the records not yet written. Two
replays of one topic at a time cannot both write: the later fences the earlier.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from app.dead_letters.reading import (
    SelectionReader,
    open_consumer,
    read_partition,
    topic_partitions,
)
from app.dead_letters.records import REPLAYED_FROM, DeadLetter, iso_ms
from app.dead_letters.selection import Selection
from app.errors import ConfigError, KafkaError, TidemarkError, kafka_reason

__all__ = [
    "LEDGER_SUFFIX",
    "LedgerEntry",
    "Replay",
    "ReplayReport",
    "ledger_key",
    "ledger_topic",
    "read_ledger",
    "transactional_id",
]

#: The ledger of dead-letter topic T is topic ``T.replays``.
LEDGER_SUFFIX = ".replays"

#: Records per transaction: small enough that an aborted one is cheap to write again, large
#: enough that the commits' round trips do not dominate.
CHUNK = 500

#: A replay's transactions stay open at most this long before the broker aborts them.
_TRANSACTION_TIMEOUT_MS = 120_000


def ledger_topic(dead_letter_topic: str) -> str:
    return dead_letter_topic + LEDGER_SUFFIX


def transactional_id(dead_letter_topic: str) -> str:
    """One id per dead-letter topic: a replay fences the earlier one of the same topic."""
    return f"tidemark-replay-{dead_letter_topic}"


def ledger_key(coordinates: str, target: str) -> str:
    """The ledger key of a record (``<topic>/<partition>/<offset>``) replayed to ``target``
    (topic names hold no ``>``)."""
    return f"{coordinates}>{target}"


@dataclass(frozen=True)
class LedgerEntry:
    """A ledger record: which dead letter went to which topic, when, by which replay, and how
    many times (a forced replay counts one more)."""

    dead_letter: str
    target: str
    replayed_at_ms: int
    replay: str
    times: int = 1

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "dead_letter": self.dead_letter,
                "to": self.target,
                "replayed_at": iso_ms(self.replayed_at_ms),
                "replayed_at_ms": self.replayed_at_ms,
                "replay": self.replay,
                "times": self.times,
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> LedgerEntry:
        data = json.loads(raw)
        return cls(
            dead_letter=str(data["dead_letter"]),
            target=str(data["to"]),
            replayed_at_ms=int(data["replayed_at_ms"]),
            replay=str(data["replay"]),
            times=int(data.get("times", 1)),
        )


def read_ledger(
    conf: Mapping[str, str], dead_letter_topic: str, stall_seconds: float = 30.0
) -> dict[str, LedgerEntry]:
    """The ledger of ``dead_letter_topic`` by key (empty when it has none), read_committed
    to its current end; the last record of a key wins, as compaction keeps it."""
    from confluent_kafka import KafkaException, TopicPartition

    topic = ledger_topic(dead_letter_topic)
    consumer = open_consumer(conf)
    entries: dict[str, LedgerEntry] = {}
    try:
        try:
            if topic not in consumer.list_topics(timeout=15).topics:
                return entries
        except KafkaException as exc:
            raise KafkaError(f"cannot read the replay ledger {topic}: {kafka_reason(exc)}") from exc
        partitions = topic_partitions(consumer, conf, topic)

        for partition in partitions:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=15
            )
            for msg in read_partition(consumer, topic, partition, low, high, stall_seconds):
                key = (msg.key() or b"").decode("utf-8", errors="replace")
                if msg.value() is None:
                    entries.pop(key, None)
                    continue
                try:
                    entries[key] = LedgerEntry.from_json(msg.value())
                except (ValueError, KeyError, TypeError) as exc:
                    raise TidemarkError(
                        f"{topic} partition {partition} offset {msg.offset()} is not a replay"
                        f" ledger record ({type(exc).__name__}: {exc}): {topic} is the ledger"
                        f" Tidemark keeps of the replays of {dead_letter_topic}; write nothing"
                        " else there"
                    ) from exc
    finally:
        consumer.close()
    return entries


def replayed_targets(ledger: Mapping[str, LedgerEntry]) -> dict[str, list[str]]:
    """For each dead letter's coordinates, the topics the ledger says it was replayed to."""
    out: dict[str, list[str]] = {}
    for entry in ledger.values():
        out.setdefault(entry.dead_letter, []).append(entry.target)
    return out


@dataclass
class ReplayReport:
    """What a replay did: ``written`` records (in ``transactions``), those it skipped as
    already replayed (``already``, with their ledger entries), those that a dry run would
    write (``would_write``)."""

    dead_letter_topic: str
    target: str
    replay: str
    forced: bool
    dry_run: bool
    written: int = 0
    transactions: int = 0
    already: list[tuple[DeadLetter, LedgerEntry]] = field(default_factory=list)
    would_write: list[DeadLetter] = field(default_factory=list)
    not_dead_letters: int = 0
    replays: list[tuple[int, int]] = field(default_factory=list)

    def to_text(self) -> str:
        lines = []
        ledger = ledger_topic(self.dead_letter_topic)
        if self.dry_run:
            lines.append(
                f"dry run: would replay {len(self.would_write)} dead letter(s) of"
                f" {self.dead_letter_topic} to {self.target}"
                + "".join(f"\n  {span}" for span in _spans(_places(self.would_write)))
            )
        elif self.written:
            lines.append(
                f"replayed {self.written} dead letter(s) of {self.dead_letter_topic} to"
                f" {self.target} in {self.transactions} transaction(s) (replay {self.replay},"
                f" recorded in {ledger})"
            )
        if self.already:
            verb = "written again (--force)" if self.forced else "skipped"
            lines.append(
                f"{verb}: {len(self.already)} dead letter(s) already replayed to"
                f" {self.target}:"
            )
            by_replay: dict[str, list[tuple[DeadLetter, LedgerEntry]]] = {}
            for letter, entry in self.already:
                by_replay.setdefault(entry.replay, []).append((letter, entry))
            for replay, items in by_replay.items():
                stamp = iso_ms(max(e.replayed_at_ms for _l, e in items))
                for span in _spans(_places([letter for letter, _e in items])):
                    lines.append(f"  {span}, by replay {replay} at {stamp}")
            if not self.forced:
                lines.append("  (--force writes them again)")
        if self.replays:
            lines.append(
                f"left out: {len(self.replays)} dead letter(s) of records a replay wrote"
                " that were refused again:"
            )
            lines.extend(f"  {span}" for span in _spans(self.replays))
            lines.append(
                "  (a replay does not send them round again; --include-replayed takes them)"
            )
        if not self.dry_run and not self.written:
            lines.append(f"nothing written to {self.target}")
        if self.not_dead_letters:
            lines.append(
                f"skipped {self.not_dead_letters} record(s) without the S6 headers"
                " (not written by Tidemark)"
            )
        return "\n".join(lines) + "\n"


def _places(letters: list[DeadLetter]) -> list[tuple[int, int]]:
    return [(letter.partition, letter.offset) for letter in letters]


def _spans(places: list[tuple[int, int]]) -> list[str]:
    """Runs of consecutive offsets per partition: ``partition 0 offsets 3..7 (5)``."""
    out: list[str] = []
    by_partition: dict[int, list[int]] = {}
    for partition, offset in places:
        by_partition.setdefault(partition, []).append(offset)
    for partition, offsets in sorted(by_partition.items()):
        offsets.sort()
        runs: list[tuple[int, int]] = []
        for offset in offsets:
            if runs and offset == runs[-1][1] + 1:
                runs[-1] = (runs[-1][0], offset)
            else:
                runs.append((offset, offset))
        shown = ", ".join(str(a) if a == b else f"{a}..{b}" for a, b in runs[:8])
        if len(runs) > 8:
            shown += f", ... ({len(runs) - 8} more runs)"
        lines = f"partition {partition} offset(s) {shown} ({len(offsets)})"
        out.append(lines)
    return out


#: Called every ``progress_every`` records and ``progress_seconds`` with the records produced
#: so far (those of the open transaction included) and the seconds since the replay started.
Progress = Callable[[int, float], None]


@dataclass
class Replay:
    """One replay of ``selection`` of ``dead_letter_topic`` to ``target``."""

    conf: Mapping[str, str]
    dead_letter_topic: str
    target: str
    selection: Selection
    force: bool = False
    dry_run: bool = False
    chunk: int = CHUNK
    stall_seconds: float = 30.0
    progress: Progress | None = None
    progress_every: int = 10_000
    progress_seconds: float = 10.0

    def run(self) -> ReplayReport:
        self._check_topics()
        report = ReplayReport(
            self.dead_letter_topic, self.target, uuid.uuid4().hex[:12], self.force,
            self.dry_run,
        )
        producer = None if self.dry_run else self._producer()
        try:
            if producer is not None:
                self._ensure_ledger()
            # After init_transactions: an earlier replay's open transaction is aborted, so
            # the ledger read here is every record written to the target.
            ledger = read_ledger(self.conf, self.dead_letter_topic, self.stall_seconds)
            self._replay(producer, ledger, report)
        finally:
            if producer is not None:
                producer.flush(10)
        return report

    def _check_topics(self) -> None:
        ledger = ledger_topic(self.dead_letter_topic)
        if self.target in (self.dead_letter_topic, ledger):
            raise ConfigError(
                f"--to {self.target}: a replay cannot write to the dead-letter topic or its"
                " ledger; give the topic of the table that should read the records again"
            )
        consumer = open_consumer(self.conf)
        try:
            topic_partitions(consumer, self.conf, self.dead_letter_topic)
            if self.target not in consumer.list_topics(timeout=15).topics:
                raise KafkaError(
                    f"target topic {self.target} does not exist: create it (kafka-topics.sh"
                    f" --create --topic {self.target} --partitions N), or give the topic of"
                    " an existing table with --to"
                )
        finally:
            consumer.close()

    def _producer(self) -> Any:
        from confluent_kafka import KafkaException, Producer

        from app.connectors.sink.producers import PRODUCER_DEFAULTS

        tid = transactional_id(self.dead_letter_topic)
        try:
            producer = Producer(
                {
                    **self.conf,
                    **PRODUCER_DEFAULTS,
                    "transactional.id": tid,
                    "enable.idempotence": True,
                    "acks": "all",
                    "transaction.timeout.ms": _TRANSACTION_TIMEOUT_MS,
                    "message.max.bytes": 10485760,
                    "linger.ms": 5,
                    "log_level": 3,
                }
            )
            producer.init_transactions(60)
        except KafkaException as exc:
            raise KafkaError(
                f"cannot start the replay's transactions (transactional.id {tid}):"
                f" {kafka_reason(exc)}: check that the broker supports transactions and that"
                " Tidemark's user may use this transactional id (TIDEMARK_KAFKA_*)"
            ) from exc
        return producer

    def _ensure_ledger(self) -> None:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

        topic = ledger_topic(self.dead_letter_topic)
        try:
            admin = AdminClient({**self.conf, "log_level": 3})
            if topic in admin.list_topics(timeout=15).topics:
                return
            new = NewTopic(
                topic, num_partitions=1, replication_factor=-1,
                config={"cleanup.policy": "compact"},
            )
            admin.create_topics([new], request_timeout=30)[topic].result()
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" in str(exc):
                return
            raise KafkaError(
                f"cannot create the replay ledger {topic}: {kafka_reason(exc)}: create it"
                f" (kafka-topics.sh --create --topic {topic} --partitions 1 --config"
                " cleanup.policy=compact) or let Tidemark's user create topics"
            ) from exc

    def _replay(self, producer: Any, ledger: Mapping[str, LedgerEntry], report: ReplayReport
                ) -> None:
        from confluent_kafka import KafkaException

        reader = SelectionReader(
            self.conf, self.dead_letter_topic, self.selection, self.stall_seconds
        )
        started = time.monotonic()
        next_count, next_time = self.progress_every, started + self.progress_seconds
        pending: list[tuple[DeadLetter, LedgerEntry]] = []
        failures: list[str] = []
        in_transaction = False
        try:
            for letter in reader:
                key = ledger_key(letter.coordinates, self.target)
                earlier = ledger.get(key)
                if earlier is not None:
                    report.already.append((letter, earlier))
                    if not self.force:
                        continue
                if self.dry_run:
                    report.would_write.append(letter)
                    continue
                entry = LedgerEntry(
                    letter.coordinates, self.target, int(time.time() * 1000), report.replay,
                    (earlier.times + 1) if earlier is not None else 1,
                )
                if not in_transaction:
                    producer.begin_transaction()
                    in_transaction = True
                self._produce(producer, letter, key, entry, failures)
                pending.append((letter, entry))
                produced = report.written + len(pending)
                if len(pending) >= self.chunk:
                    self._commit(producer, pending, failures, report)
                    in_transaction = False
                now = time.monotonic()
                if self.progress and (produced >= next_count or now >= next_time):
                    self.progress(produced, now - started)
                    next_count = produced + self.progress_every
                    next_time = now + self.progress_seconds
            if in_transaction:
                self._commit(producer, pending, failures, report)
        except (KafkaException, TidemarkError) as exc:
            if in_transaction:
                try:
                    producer.abort_transaction(30)
                except KafkaException:
                    pass  # a fenced or failed producer: the broker aborts it on its own
            if isinstance(exc, TidemarkError) and not isinstance(exc, KafkaError):
                raise  # not a failure of Kafka (not a dead-letter topic): as it is
            reason = str(exc) if isinstance(exc, KafkaError) else kafka_reason(exc)
            if failures:
                reason = f"{reason} ({failures[0]})"
            raise KafkaError(
                f"replay to {self.target} failed: {reason}. {report.written} dead letter(s)"
                " were written and recorded in committed transactions before it; the"
                f" {len(pending)} of the failed transaction were not written. Run the same"
                " command again (without --force) to replay the rest"
                + _fenced_hint(exc, self.dead_letter_topic)
            ) from exc
        report.not_dead_letters = reader.foreign
        report.replays = reader.replays

    def _produce(
        self, producer: Any, letter: DeadLetter, key: str, entry: LedgerEntry,
        failures: list[str],
    ) -> None:
        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                failures.append(str(err))

        headers = [*letter.headers, (REPLAYED_FROM, letter.coordinates.encode())]
        # The dead letter's timestamp is its source record's (SPEC S6): the replayed record
        # keeps it, so a table timed by METADATA FROM 'timestamp' reads the same event time.
        # The ledger record is stamped when written (0).
        records = (
            (self.target, letter.key, letter.value, headers, letter.timestamp_ms or 0),
            (ledger_topic(self.dead_letter_topic), key.encode(), entry.to_json(), None, 0),
        )
        for topic, record_key, value, record_headers, stamp in records:
            while True:
                try:
                    producer.produce(
                        topic, key=record_key, value=value, headers=record_headers,
                        on_delivery=delivered, timestamp=stamp,
                    )
                    break
                except BufferError:
                    producer.poll(0.5)  # the queue is full: let deliveries drain it

    def _commit(
        self, producer: Any, pending: list[tuple[DeadLetter, LedgerEntry]],
        failures: list[str], report: ReplayReport,
    ) -> None:
        producer.commit_transaction(120)
        if failures:
            raise KafkaError(f"a record was not delivered: {failures[0]}")
        report.written += len(pending)
        report.transactions += 1
        pending.clear()


def _fenced_hint(exc: BaseException, dead_letter_topic: str) -> str:
    text = str(exc).lower()
    if "fenc" in text:
        return (
            f" (another replay of {dead_letter_topic} started and fenced this one: let it"
            " finish, then run this one again)"
        )
    return ""
