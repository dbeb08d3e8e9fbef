-- The highest seq ever assigned, in one row updated once per commit. It replaces the
-- unique index on seq, which cost an index insert for every event only to answer MAX(seq).
CREATE TABLE IF NOT EXISTS journal_head (
    id  INTEGER PRIMARY KEY CHECK (id = 0),
    seq INTEGER NOT NULL
);
INSERT OR IGNORE INTO journal_head (id, seq)
    SELECT 0, COALESCE(MAX(seq), 0) FROM journal_events;
DROP INDEX IF EXISTS journal_events_seq;
