//! [`Position`]: where an event stands in the order of the whole journal.

/// Where an event stands in the order in which [`Journal::tail_all`](crate::Journal::tail_all)
/// delivers the events of every thread. Positions are totally ordered, unique per event and
/// stable: an event's position never changes, and no event is ever committed at a position
/// below one that `tail_all` has delivered.
///
/// On PostgreSQL, `commit` is the id of the transaction that wrote the event
/// (`pg_current_xact_id()`; 0 for events written before schema 3) and `seq` orders the
/// events of one transaction. On SQLite and `memory:`, where commits are in seq order,
/// `commit` is 0 and `seq` alone orders. Within a thread, positions increase with seq.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Position {
    /// The writing transaction (PostgreSQL), else 0.
    pub commit: i64,
    /// The event's seq.
    pub seq: i64,
}

impl Position {
    /// Before every event: `tail_all(Position::START)` delivers the whole journal.
    pub const START: Position = Position { commit: 0, seq: 0 };

    /// Where an event of a backend whose commits are in seq order stands.
    pub(crate) fn with_seq(self, seq: i64) -> Position {
        Position { seq, ..self }
    }
}
