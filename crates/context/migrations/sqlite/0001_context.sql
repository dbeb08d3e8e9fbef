-- agent-context schema v1 (SQLite). Every table is prefixed `context_`.
-- A unit's id packs its thread and position: id = thread_id * 2^32 + position, so one
-- thread's units are one contiguous id range. Windows are a range scan of the primary key,
-- and the FTS5 index answers "term within this thread" with a rowid range, in order.
CREATE TABLE context_threads (
    id       INTEGER PRIMARY KEY,
    thread   TEXT    NOT NULL UNIQUE,
    last_seq INTEGER NOT NULL
);
CREATE TABLE context_units (
    id     INTEGER PRIMARY KEY,
    unit   TEXT    NOT NULL,
    size   INTEGER NOT NULL,
    body   TEXT    NOT NULL,
    folded TEXT    NOT NULL
);
CREATE UNIQUE INDEX context_units_unit ON context_units (id >> 32, unit);
-- Substring index: trigrams of the folded text (folding is done by the crate, so the
-- tokenizer is case-sensitive). External content: the text is stored once, in context_units.
CREATE VIRTUAL TABLE context_units_fts USING fts5(
    folded,
    content = 'context_units',
    content_rowid = 'id',
    tokenize = 'trigram case_sensitive 1'
);
-- Units are append-only; the index follows every insert in the same statement.
CREATE TRIGGER context_units_fts_insert AFTER INSERT ON context_units BEGIN
    INSERT INTO context_units_fts (rowid, folded) VALUES (new.id, new.folded);
END;
CREATE TABLE context_evidence (
    source    TEXT    PRIMARY KEY,
    project   TEXT    NOT NULL,
    key       TEXT    NOT NULL,
    value     TEXT    NOT NULL,
    observed  INTEGER NOT NULL,
    confirmed INTEGER NOT NULL,
    revoked   INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE INDEX context_evidence_pair ON context_evidence (project, key, observed, source);
CREATE TABLE context_memory (
    project  TEXT    NOT NULL,
    key      TEXT    NOT NULL,
    value    TEXT    NOT NULL,
    source   TEXT    NOT NULL,
    observed INTEGER NOT NULL,
    PRIMARY KEY (project, key)
) WITHOUT ROWID;
-- (project, key) pairs whose evidence changed since the last consolidation.
CREATE TABLE context_dirty (
    project TEXT NOT NULL,
    key     TEXT NOT NULL,
    PRIMARY KEY (project, key)
) WITHOUT ROWID;
