CREATE TABLE IF NOT EXISTS journal_events (
    seq       BIGINT PRIMARY KEY,
    thread    TEXT   NOT NULL,
    kind      TEXT   NOT NULL,
    payload   TEXT   NOT NULL,
    at        BIGINT NOT NULL,
    dedup_key TEXT
);
CREATE INDEX IF NOT EXISTS journal_events_thread_seq ON journal_events (thread, seq);
CREATE UNIQUE INDEX IF NOT EXISTS journal_events_dedup
    ON journal_events (thread, dedup_key) WHERE dedup_key IS NOT NULL;
