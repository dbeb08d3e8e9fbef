//! `agent_holds(text, term)`, the substring test of every search path: whether `term` occurs
//! in `text`.
//!
//! It replaces `instr(text, term) > 0`, which walks the text a character at a time and
//! compares the term at each one: about half of a tail scan's time (1-2.5 µs per 700-byte
//! unit) went there. This is memchr's vectorised substring search over the bytes.
//!
//! Invariant: for text arguments it is exactly `instr(text, term) > 0`. Both are UTF-8, and
//! a byte match of one UTF-8 string in another always starts at a character boundary, so
//! it is a character match; an empty term occurs everywhere, as `instr` says (1). A NULL
//! argument gives NULL, as `instr` does. The store passes text only (the `folded` column and
//! a folded term): a BLOB is compared by its bytes, as `instr` compares two BLOBs, and a
//! number gives NULL (where `instr` would compare its text).

use memchr::memmem;
use rusqlite::Connection;
use rusqlite::functions::{Context, FunctionFlags};
use rusqlite::types::ValueRef;

/// The function's name in SQL.
pub(super) const NAME: &str = "agent_holds";

/// Makes `agent_holds` available on `conn` (each connection has its own functions).
pub(super) fn register(conn: &Connection) -> rusqlite::Result<()> {
    conn.create_scalar_function(
        NAME,
        2,
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC,
        holds,
    )
}

fn holds(ctx: &Context<'_>) -> rusqlite::Result<Option<bool>> {
    let (Some(text), Some(term)) = (bytes(ctx.get_raw(0)), bytes(ctx.get_raw(1))) else {
        return Ok(None);
    };
    Ok(Some(memmem::find(text, term).is_some()))
}

fn bytes(value: ValueRef<'_>) -> Option<&[u8]> {
    match value {
        ValueRef::Text(bytes) | ValueRef::Blob(bytes) => Some(bytes),
        ValueRef::Null | ValueRef::Integer(_) | ValueRef::Real(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn both(conn: &Connection, text: &str, term: &str) -> (Option<bool>, Option<bool>) {
        conn.query_row(
            "SELECT agent_holds(?1, ?2), instr(?1, ?2) > 0",
            [text, term],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .unwrap()
    }

    fn connection() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        register(&conn).unwrap();
        conn
    }

    #[test]
    fn it_answers_as_instr_does_on_chosen_cases() {
        let conn = connection();
        for (text, term) in [
            ("", ""),
            ("abc", ""),
            ("", "a"),
            ("abc", "abc"),
            ("abc", "abcd"),
            ("xxabcxx", "abc"),
            ("旧登录模块", "登录"),
            ("旧登录模块", "模块x"),
            ("ǆ é", "é"),
            ("aaaaaaaaab", "aab"),
        ] {
            let (ours, instr) = both(&conn, text, term);
            assert_eq!(ours, instr, "{text:?} {term:?}");
        }
        let null: (Option<bool>, Option<bool>) = conn
            .query_row(
                "SELECT agent_holds(NULL, 'a'), instr(NULL, 'a') > 0",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(null, (None, None));
    }

    proptest! {
        /// Over texts and terms of a few characters of 1 to 4 bytes (so that partial
        /// matches of multi-byte characters are common).
        #[test]
        fn it_answers_as_instr_does(
            text in "[ab登录é\u{1F600}]{0,24}",
            term in "[ab登录é\u{1F600}]{0,4}",
        ) {
            let conn = connection();
            let (ours, instr) = both(&conn, &text, &term);
            prop_assert_eq!(ours, instr);
        }
    }
}
