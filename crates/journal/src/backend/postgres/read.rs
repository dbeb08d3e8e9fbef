//! PostgreSQL reads, on the journal's read pool. Every read sees committed events only.
//!
//! Invariants:
//! - A thread's seqs are committed in order (its writers hold the thread's lock while they
//!   allocate and commit), so a page of one thread never skips a seq a later page shows.
//! - Across threads, commits are not in seq order. [`PgReader::journal_page`] orders by
//!   `(tx, seq)` and returns only rows of transactions older than the oldest one running
//!   when its statement's snapshot was taken (`pg_snapshot_xmin`): every such transaction
//!   has ended, and every later one gets a higher id, so nothing is ever committed at or
//!   below a position it returned.

use std::sync::Arc;

use sqlx::{PgPool, Row as _};

use super::notify::OwnSender;

use crate::backend::batch::{decode, select_events};
use crate::backend::{KindPage, ReadSide};
use crate::error::JournalError;
use crate::event::Event;
use crate::payload::Decoder;
use crate::position::Position;

/// [`PgReader::journal_page`]: the columns `decode` reads, then `tx`; the horizon is an
/// uncorrelated subquery, evaluated once per statement. Served by `(tx, seq)`.
const JOURNAL_PAGE_SQL: &str = "SELECT seq, thread, kind, payload, at, dedup_key, epoch, tx \
     FROM journal_events, \
     (SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS below) AS h \
     WHERE (tx, seq) > ($1, $2) AND tx < h.below ORDER BY tx, seq LIMIT $3";

/// Longest [`ReadSide::close`] waits for connections that reads still hold.
const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Rows per query of [`PgReader::replay_all`]: large pages, few round trips.
const REPLAY_ALL_PAGE: i64 = 100 * crate::backend::PAGE;

/// The read side of a PostgreSQL journal: its pool of read connections; cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct PgReader {
    pool: PgPool,
    /// Shared by the journal's notifier and its LISTEN connection.
    own: Arc<OwnSender>,
}

impl PgReader {
    pub(crate) fn new(pool: PgPool) -> Self {
        PgReader {
            pool,
            own: Arc::default(),
        }
    }

    /// The pool, for the lease table and `tail`'s LISTEN connection.
    pub(crate) fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Which server process sends this journal's notifications.
    pub(crate) fn own_sender(&self) -> Arc<OwnSender> {
        self.own.clone()
    }
}

impl ReadSide for PgReader {
    async fn replay_page(
        &self,
        thread: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<Event>, JournalError> {
        let sql = select_events!("WHERE thread = $1 AND seq > $2 ORDER BY seq LIMIT $3");
        let rows = sqlx::query(sql)
            .bind(thread)
            .bind(after)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        let mut payloads = Decoder::default();
        rows.iter().map(|row| decode(row, &mut payloads)).collect()
    }

    async fn replay_kind_page(
        &self,
        thread: &str,
        kind: &str,
        after: i64,
        limit: i64,
    ) -> Result<KindPage, JournalError> {
        // The top first: a thread's commits are in seq order (its lock), so the events
        // read next, bounded by it, are all there were up to it.
        let top = self.last_seq(thread).await?;
        let Some(top) = top else {
            return Ok(KindPage::new(Vec::new(), after, None, limit));
        };
        let sql = select_events!(
            "WHERE thread = $1 AND seq > $2 AND seq <= $3 AND kind = $4 ORDER BY seq LIMIT $5"
        );
        let rows = sqlx::query(sql)
            .bind(thread)
            .bind(after)
            .bind(top)
            .bind(kind)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        let mut payloads = Decoder::default();
        let events = rows
            .iter()
            .map(|row| decode(row, &mut payloads))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(KindPage::new(events, after, Some(top), limit))
    }

    async fn replay_all(&self, thread: &str, after: i64) -> Result<Vec<Event>, JournalError> {
        let mut events = Vec::new();
        let mut last = after;
        loop {
            let page = self.replay_page(thread, last, REPLAY_ALL_PAGE).await?;
            let full = page.len() as i64 == REPLAY_ALL_PAGE;
            if let Some(event) = page.last() {
                last = event.seq;
            }
            events.extend(page);
            if !full {
                return Ok(events);
            }
        }
    }

    async fn find_by_key(&self, thread: &str, key: &str) -> Result<Option<Event>, JournalError> {
        let sql = select_events!("WHERE thread = $1 AND dedup_key = $2");
        let row = sqlx::query(sql)
            .bind(thread)
            .bind(key)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref()
            .map(|row| decode(row, &mut Decoder::default()))
            .transpose()
    }

    async fn last_of_kind(&self, thread: &str, kind: &str) -> Result<Option<Event>, JournalError> {
        // The (thread, seq) key walked backwards: stops at the newest match.
        let sql = select_events!("WHERE thread = $1 AND kind = $2 ORDER BY seq DESC LIMIT 1");
        let row = sqlx::query(sql)
            .bind(thread)
            .bind(kind)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref()
            .map(|row| decode(row, &mut Decoder::default()))
            .transpose()
    }

    /// Sorted by bytes (`COLLATE "C"`), as on SQLite and `memory:`: the database's own
    /// collation may be a language's (`en_US.UTF-8`), which sorts `run:a` before `run:B`.
    async fn threads(&self) -> Result<Vec<String>, JournalError> {
        Ok(sqlx::query_scalar(
            "SELECT thread FROM (SELECT DISTINCT thread FROM journal_events) AS t \
             ORDER BY thread COLLATE \"C\"",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    async fn journal_page(
        &self,
        after: Position,
        limit: i64,
    ) -> Result<Vec<(Position, Event)>, JournalError> {
        // The horizon and the rows come from the same statement, so from one snapshot: a
        // transaction below the horizon has ended, and if it committed its rows are seen.
        let rows = sqlx::query(JOURNAL_PAGE_SQL)
            .bind(after.commit)
            .bind(after.seq)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        let mut payloads = Decoder::default();
        rows.iter()
            .map(|row| {
                let event = decode(row, &mut payloads)?;
                let commit: i64 = row.try_get(7)?;
                Ok((
                    Position {
                        commit,
                        seq: event.seq,
                    },
                    event,
                ))
            })
            .collect()
    }

    async fn last_seq(&self, thread: &str) -> Result<Option<i64>, JournalError> {
        Ok(
            sqlx::query_scalar("SELECT MAX(seq) FROM journal_events WHERE thread = $1")
                .bind(thread)
                .fetch_one(&self.pool)
                .await?,
        )
    }

    /// Closes the idle connections and waits for the others, at most [`CLOSE_WAIT`]: a read
    /// that its caller stopped polling midway (a tail left pending in a `select!`, say) holds
    /// its connection until it is dropped, and `close` must not wait for that.
    async fn close(&self) {
        if tokio::time::timeout(CLOSE_WAIT, self.pool.close())
            .await
            .is_err()
        {
            tracing::warn!(
                in_use = self.pool.size(),
                "journal closed with reads still holding connections; they close when dropped"
            );
        }
    }
}
