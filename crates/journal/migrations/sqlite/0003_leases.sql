-- The lease epoch a fenced append was written under (NULL: not fenced).
ALTER TABLE journal_events ADD COLUMN epoch INTEGER;
-- Named leases: a claim with a holder, an expiry (Unix ms) and a fencing epoch that every
-- claim increments. `status` 'open' may be claimed when free or expired; 'closed' may not.
-- `info` is the holder's JSON summary (a runs table keeps status, steps, tokens there).
CREATE TABLE IF NOT EXISTS journal_leases (
    name       TEXT    PRIMARY KEY,
    status     TEXT    NOT NULL,
    holder     TEXT,
    epoch      INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    info       TEXT    NOT NULL,
    updated_at INTEGER NOT NULL
);
