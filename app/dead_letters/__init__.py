"""``tidemark dead-letters``: inspect and replay a table's dead-letter topic.

Its modules, each for one thing:

* :mod:`~app.dead_letters.records`: a dead letter as read back, its SPEC S6 headers parsed;
* :mod:`~app.dead_letters.selection`: which dead letters a command takes (reason, table,
  partition, offsets, Kafka time, a limit);
* :mod:`~app.dead_letters.reading`: reading a selection from Kafka (read_committed);
* :mod:`~app.dead_letters.summary`: counts by reason and table, time ranges, offsets;
* :mod:`~app.dead_letters.show`: the records as text or JSON lines, values decoded with a
  program's table schema;
* :mod:`~app.dead_letters.replay`: re-producing a selection to a topic in Kafka transactions,
  recorded in the ledger topic ``<dead-letter topic>.replays``
  (docs/adr/0012-dead-letter-replay-ledger.md).

None of them imports Spark: the commands start in a fraction of a second.
"""
