-- agent-context schema v3 (PostgreSQL): how far a derived thread's source has been derived.
-- `derived_through` is a position in the thread's source, opaque to the store (for a run's
-- history: the journal seq of the run through which its units were derived), set by the
-- writer of the units it covers, in the same transaction, and only ever raised. NULL: not
-- known, derive from the start.
ALTER TABLE context_threads ADD COLUMN derived_through BIGINT;
