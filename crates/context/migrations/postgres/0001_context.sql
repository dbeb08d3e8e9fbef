-- agent-context schema v1 (PostgreSQL). Every table is prefixed `context_`.
-- Substring search uses pg_trgm: a GIN trigram index on the folded text serves
-- `folded LIKE '%term%'` for terms of 3 or more characters.
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE TABLE context_threads (
    id       BIGSERIAL PRIMARY KEY,
    thread   TEXT   NOT NULL UNIQUE,
    last_seq BIGINT NOT NULL
);
CREATE TABLE context_units (
    thread_id BIGINT NOT NULL,
    seq       BIGINT NOT NULL,
    unit      TEXT   NOT NULL,
    size      BIGINT NOT NULL,
    body      TEXT   NOT NULL,
    folded    TEXT   NOT NULL,
    PRIMARY KEY (thread_id, seq),
    UNIQUE (thread_id, unit)
);
CREATE INDEX context_units_folded_trgm ON context_units USING gin (folded gin_trgm_ops);
CREATE TABLE context_evidence (
    source    TEXT    PRIMARY KEY,
    project   TEXT    NOT NULL,
    key       TEXT    NOT NULL,
    value     TEXT    NOT NULL,
    observed  BIGINT  NOT NULL,
    confirmed BOOLEAN NOT NULL,
    revoked   BOOLEAN NOT NULL DEFAULT FALSE
);
CREATE INDEX context_evidence_pair ON context_evidence (project, key, observed, source);
CREATE TABLE context_memory (
    project  TEXT   NOT NULL,
    key      TEXT   NOT NULL,
    value    TEXT   NOT NULL,
    source   TEXT   NOT NULL,
    observed BIGINT NOT NULL,
    PRIMARY KEY (project, key)
);
CREATE TABLE context_dirty (
    project TEXT NOT NULL,
    key     TEXT NOT NULL,
    PRIMARY KEY (project, key)
);
