-- Clustered by (thread, seq): a thread's events sit in adjacent pages, so replaying a
-- thread reads only that thread's rows, in order, without a lookup per row.
CREATE TABLE IF NOT EXISTS journal_events (
    thread    TEXT    NOT NULL,
    seq       INTEGER NOT NULL,
    kind      TEXT    NOT NULL,
    payload   TEXT    NOT NULL,
    at        INTEGER NOT NULL,
    dedup_key TEXT,
    PRIMARY KEY (thread, seq)
) WITHOUT ROWID;
-- Global order: seq is unique across threads (since schema 2 kept by journal_head).
CREATE UNIQUE INDEX IF NOT EXISTS journal_events_seq ON journal_events (seq);
CREATE UNIQUE INDEX IF NOT EXISTS journal_events_dedup
    ON journal_events (thread, dedup_key) WHERE dedup_key IS NOT NULL;
