-- Writes without a global lock (issue 35). Seqs come from a sequence instead of
-- MAX(seq)+1 under one advisory lock; each row records the transaction that wrote it, which
-- orders the whole journal for readers of every thread (see docs/architecture.md).
CREATE SEQUENCE IF NOT EXISTS journal_seq AS BIGINT;
-- Continue after the highest seq written so far (the first new seq is MAX(seq)+1, or 1).
SELECT setval('journal_seq', COALESCE((SELECT MAX(seq) FROM journal_events), 0) + 1, false);
-- The writing transaction's id (`pg_current_xact_id()`, epoch-extended, so it never wraps).
-- Rows written before this step read 0: they were committed in seq order under the old
-- write lock, so (0, seq) is their order, and it is before every later transaction's.
ALTER TABLE journal_events ADD COLUMN IF NOT EXISTS tx BIGINT NOT NULL DEFAULT 0;
-- A writer that still inserted without naming `tx` would be placed by its own transaction.
ALTER TABLE journal_events ALTER COLUMN tx SET DEFAULT (pg_current_xact_id()::text::bigint);
CREATE INDEX IF NOT EXISTS journal_events_tx_seq ON journal_events (tx, seq);
