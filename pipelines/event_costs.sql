-- SQLstream's windowed aggregation (seed 003): "a running average cost of the events of the
-- last hour", a new value on every input row. Each event is written once the waterline of
-- ts passes its time, with the average over the hour up to it (docs/semantics.md, OVER
-- aggregates).

CREATE TABLE event (
    seqno          INT NOT NULL,
    ts             TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE,
    classification VARCHAR NOT NULL,
    cost           DECIMAL(10, 2)
) WITH (
    'topic'       = 'events',
    'dead_letter' = 'events.dlq'
);

CREATE VIEW avg_cost WITH ('topic' = 'events.avg_cost') AS
SELECT seqno, ts, classification, cost, AVG(cost) OVER w AS avg_cost, COUNT(*) OVER w AS events
FROM event
WINDOW w AS (PARTITION BY classification ORDER BY ts
             RANGE BETWEEN INTERVAL '1' HOUR PRECEDING AND CURRENT ROW);
