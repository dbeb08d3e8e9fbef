-- agent-context schema v4 (SQLite): FTS5 merges the index's segments 16 at a time instead
-- of 4 (`automerge`, stored in the index's own config table). Every fold writes a new
-- segment, and with merges of 4 a unit's index entries were rewritten at every level of a
-- deep tree; with 16 the tree is half as deep, so a fold does less merge work per unit,
-- and a query looks up its trigrams in more segments. Measured on 700-byte units
-- (`bench_context`, one run each): a 1M-unit fill 34.1 -> 24.4 s, appends to `:memory:`
-- 35k -> 43k units/s; an absent term at 1M units 0.057 -> 0.093 ms, a rare one 0.021 ->
-- 0.027 ms. Results do not change: only the index's layout does.
INSERT INTO context_units_fts (context_units_fts, rank) VALUES ('automerge', 16);
