-- agent-context schema v2 (SQLite): the trigram index is deferred.
-- Appends write `context_units` only; a fold (in the background, or in the append itself
-- when a thread's tail grows past its bound) copies a thread's oldest un-indexed units into
-- `context_units_fts` and advances `indexed_seq` in the same transaction. Invariant: a
-- thread's units with position <= indexed_seq are in the index exactly once, those above it
-- are not in it at all; `tail_bytes` is the sum of the stored sizes of those above it.
-- Existing rows were indexed by the v1 trigger, so every existing thread starts caught up.
ALTER TABLE context_threads ADD COLUMN indexed_seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE context_threads ADD COLUMN tail_bytes INTEGER NOT NULL DEFAULT 0;
UPDATE context_threads SET indexed_seq = last_seq;
DROP TRIGGER context_units_fts_insert;
-- The threads a fold has work in.
CREATE INDEX context_threads_unindexed ON context_threads (id) WHERE indexed_seq < last_seq;
