-- agent-context schema v4 (SQLite): inside a write, FTS5 merges the index's segments only
-- once a level holds 16 of them (`automerge`, stored in the index's own config table; the
-- default is 4). Every fold writes a new segment, and with merges of 4 inside each fold a
-- unit's index entries were rewritten at every level of a deep tree, on the write path.
-- The rest of the merging is done by the store's idle writer (FTS5's 'merge' command,
-- `backend/sqlite/index.rs`), which brings every level below 4 segments again. Measured on
-- 700-byte units (`bench_context`, one run each): a 1M-unit fill 34.1 -> 24.4 s, appends
-- to `:memory:` 35k -> 43k units/s. Results do not change: only the index's layout does.
INSERT INTO context_units_fts (context_units_fts, rank) VALUES ('automerge', 16);
