-- A conditional batch in one round trip (issue 35). The writer plans the batch assuming
-- that no dedup key is written yet, that each expected-version condition holds against the
-- thread's head and that each fence's lease is at its epoch; this function checks exactly
-- those assumptions under the threads' locks and writes the planned rows when they hold.
-- When one does not, it writes nothing and returns NULL, and the writer plans the batch
-- again in a transaction that reads what is there (`append.rs`).
--
-- The order is the write path's (docs/architecture.md, "PostgreSQL write path"): the
-- threads' locks in key order; then the reads, each statement of a VOLATILE function
-- taking a snapshot after the locks (and the fenced leases' rows locked FOR SHARE before
-- their epochs are read); then the transaction id and the seqs, sorted and given to the
-- rows in order. Returns the seqs in row order.
CREATE OR REPLACE FUNCTION journal_append(
    lock_seed BIGINT, lock_threads TEXT[], relaxed BOOLEAN,
    head_threads TEXT[], heads BIGINT[],
    dedup_threads TEXT[], dedup_keys TEXT[],
    leases TEXT[], epochs BIGINT[],
    row_threads TEXT[], row_kinds TEXT[], row_payloads TEXT[], row_ats BIGINT[],
    row_dedup_keys TEXT[], row_epochs BIGINT[]
) RETURNS BIGINT[] LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    txid BIGINT;
    seqs BIGINT[];
BEGIN
    PERFORM pg_advisory_xact_lock(k) FROM
        (SELECT DISTINCT hashtextextended(t, lock_seed) AS k FROM unnest(lock_threads) AS t
         ORDER BY k) AS keys;
    IF cardinality(leases) > 0 THEN
        PERFORM 1 FROM journal_leases WHERE name = ANY(leases) FOR SHARE;
        IF EXISTS (SELECT 1 FROM unnest(leases, epochs) AS f(name, epoch)
                   WHERE (SELECT l.epoch FROM journal_leases AS l WHERE l.name = f.name)
                         IS DISTINCT FROM f.epoch) THEN
            RETURN NULL;
        END IF;
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(head_threads, heads) AS h(thread, head)
               WHERE (SELECT MAX(e.seq) FROM journal_events AS e WHERE e.thread = h.thread)
                     IS DISTINCT FROM h.head) THEN
        RETURN NULL;
    END IF;
    -- One probe of the partial dedup index per key (see READ_SQL in append.rs).
    IF EXISTS (SELECT 1 FROM unnest(dedup_threads, dedup_keys) AS k(thread, key)
               CROSS JOIN LATERAL
               (SELECT 1 FROM journal_events AS e
                WHERE e.thread = k.thread AND e.dedup_key = k.key
                  AND e.dedup_key IS NOT NULL LIMIT 1) AS d) THEN
        RETURN NULL;
    END IF;
    IF relaxed THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    txid := pg_current_xact_id()::text::bigint;
    seqs := ARRAY(SELECT nextval('journal_seq') AS s
                  FROM generate_series(1, cardinality(row_threads)) ORDER BY s);
    INSERT INTO journal_events (seq, thread, kind, payload, at, dedup_key, epoch, tx)
    SELECT s.seq, e.thread, e.kind, e.payload, e.at, e.dedup_key, e.epoch, txid
    FROM unnest(seqs) WITH ORDINALITY AS s(seq, ord)
    JOIN unnest(row_threads, row_kinds, row_payloads, row_ats, row_dedup_keys, row_epochs)
         WITH ORDINALITY AS e(thread, kind, payload, at, dedup_key, epoch, ord)
      ON e.ord = s.ord;
    RETURN seqs;
END
$$;
