-- The lease epoch a fenced append was written under (NULL: not fenced).
ALTER TABLE journal_events ADD COLUMN IF NOT EXISTS epoch BIGINT;
-- Named leases: a claim with a holder, an expiry (Unix ms, PostgreSQL's clock) and a
-- fencing epoch that every claim increments. `status` 'open' may be claimed when free or
-- expired; 'closed' may not. `info` is the holder's JSON summary.
CREATE TABLE IF NOT EXISTS journal_leases (
    name       TEXT   PRIMARY KEY,
    status     TEXT   NOT NULL,
    holder     TEXT,
    epoch      BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    info       TEXT   NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS journal_leases_claimable
    ON journal_leases (updated_at) WHERE status = 'open';
