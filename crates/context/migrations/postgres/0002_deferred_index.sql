-- agent-context schema v2 (PostgreSQL): the trigram index is deferred.
-- Appends write `context_units` only (its GIN index is dropped: maintaining it cost about
-- 20x the row insert, pending list or not). A fold copies a thread's oldest un-indexed
-- units into `context_units_trgm`, which carries the GIN index, and advances `indexed_seq`
-- in the same transaction. Invariant: a thread's units with seq <= indexed_seq have
-- exactly one row in `context_units_trgm`, those above it none; `tail_bytes` is the sum of
-- the stored sizes of those above it. Existing rows are copied here, once.
ALTER TABLE context_threads ADD COLUMN indexed_seq BIGINT NOT NULL DEFAULT 0;
ALTER TABLE context_threads ADD COLUMN tail_bytes BIGINT NOT NULL DEFAULT 0;
CREATE TABLE context_units_trgm (
    thread_id BIGINT NOT NULL,
    seq       BIGINT NOT NULL,
    folded    TEXT   NOT NULL,
    PRIMARY KEY (thread_id, seq)
);
INSERT INTO context_units_trgm (thread_id, seq, folded)
    SELECT thread_id, seq, folded FROM context_units;
UPDATE context_threads SET indexed_seq = last_seq;
DROP INDEX context_units_folded_trgm;
CREATE INDEX context_units_trgm_folded ON context_units_trgm USING gin (folded gin_trgm_ops);
CREATE INDEX context_threads_unindexed ON context_threads (id) WHERE indexed_seq < last_seq;
