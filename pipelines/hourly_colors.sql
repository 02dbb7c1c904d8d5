-- SQLstream's "grouping by hours" (rowtime bounds): count events per colour per hour.
-- A producer that goes quiet can close the hour with a punctuation record
-- (header tidemark.bound, SPEC S4; `tidemark punctuate`) instead of waiting for the next row.

CREATE TABLE color_event (
    rowtime TIMESTAMP NOT NULL LATENESS INTERVAL '1' SECOND,
    color   VARCHAR   NOT NULL
) WITH (
    'topic'       = 'colors',
    'format'      = 'json',
    'dead_letter' = 'colors.dlq'
);

-- One row per colour per hour, written once the hour is complete.
CREATE VIEW hourly_color_count WITH ('topic' = 'colors.hourly', 'format' = 'append') AS
SELECT window_start, window_end, color, COUNT(*) AS events
FROM TABLE(TUMBLE(TABLE color_event, DESCRIPTOR(rowtime), INTERVAL '1' HOUR))
GROUP BY window_start, window_end, color
EMIT AFTER WATERMARK;
