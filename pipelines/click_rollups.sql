-- Clicks rolled up by minute, hour and day: a cascade of windows (views over EMIT AFTER
-- WATERMARK aggregates). Each level windows on the window end of the level below, whose rows
-- reach it only once final, so every level is complete when the clicks' waterline passes its
-- window's end, and its state is freed then. Clicks arrive up to a minute out of order.

CREATE TABLE clicks (
    user_id BIGINT    NOT NULL,
    url     VARCHAR,
    ts      TIMESTAMP NOT NULL LATENESS INTERVAL '1' MINUTE
) WITH (
    'topic'       = 'clicks',
    'format'      = 'avro',
    'dead_letter' = 'clicks.dlq'
);

-- Clicks per user and minute, final once the waterline passes the minute's end.
CREATE LOCAL VIEW per_minute AS
SELECT window_end AS minute_end, user_id, COUNT(*) AS clicks
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, user_id
EMIT AFTER WATERMARK;

-- Clicks per user and hour, from the final minutes.
CREATE VIEW per_hour WITH ('topic' = 'clicks.per_hour', 'format' = 'append') AS
SELECT window_end AS hour_end, user_id, SUM(clicks) AS clicks
FROM TABLE(TUMBLE(TABLE per_minute, DESCRIPTOR(minute_end), INTERVAL '1' HOUR))
GROUP BY window_start, window_end, user_id
EMIT AFTER WATERMARK;

-- Clicks per user and day, from the final hours.
CREATE VIEW per_day WITH ('topic' = 'clicks.per_day', 'format' = 'append') AS
SELECT window_start AS day, user_id, SUM(clicks) AS clicks, MAX(clicks) AS busiest_hour
FROM TABLE(TUMBLE(TABLE per_hour, DESCRIPTOR(hour_end), INTERVAL '1' DAY))
GROUP BY window_start, window_end, user_id
EMIT AFTER WATERMARK;
