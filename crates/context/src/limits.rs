//! Input limits. Every public entry point checks its input against these before touching
//! the database, so bad input gets a typed error and never a panic or a half-written row.

use crate::error::{ContextError, Result};

/// Thread, unit, source, project and key names: 1 to 256 bytes of UTF-8, no NUL.
pub const MAX_NAME_BYTES: usize = 256;
/// A unit's items, serialised as compact JSON: at most 1 MiB.
pub const MAX_UNIT_BYTES: usize = 1 << 20;
/// Items in one unit.
pub const MAX_ITEMS_PER_UNIT: usize = 1024;
/// An evidence value: at most 64 KiB.
pub const MAX_VALUE_BYTES: usize = 64 << 10;
/// A search term: 1 to 1024 bytes.
pub const MAX_TERM_BYTES: usize = 1024;
/// Most hits one search returns.
pub const MAX_SEARCH_LIMIT: usize = 1000;
/// Most units one window returns (`keep_units`, and the cap of a budgeted window).
pub const MAX_WINDOW_UNITS: usize = 10_000;
/// Most units in one [`append_units`](crate::ContextStore::append_units) batch.
pub const MAX_BATCH_UNITS: usize = 10_000;

pub(crate) fn name(field: &'static str, value: &str) -> Result<()> {
    if value.is_empty() {
        return Err(ContextError::Empty { field });
    }
    text(field, value, MAX_NAME_BYTES)
}

pub(crate) fn text(field: &'static str, value: &str, max: usize) -> Result<()> {
    if value.len() > max {
        return Err(ContextError::TooLarge {
            field,
            got: value.len(),
            max,
        });
    }
    if value.contains('\0') {
        return Err(ContextError::NulChar { field });
    }
    Ok(())
}

pub(crate) fn keep_units(keep: usize) -> Result<()> {
    if keep == 0 || keep > MAX_WINDOW_UNITS {
        return Err(ContextError::InvalidKeepUnits {
            got: keep,
            max: MAX_WINDOW_UNITS,
        });
    }
    Ok(())
}

pub(crate) fn search(term: &str, limit: usize) -> Result<()> {
    if term.is_empty() {
        return Err(ContextError::EmptyTerm);
    }
    text("search term", term, MAX_TERM_BYTES)?;
    if limit == 0 || limit > MAX_SEARCH_LIMIT {
        return Err(ContextError::InvalidLimit {
            got: limit,
            max: MAX_SEARCH_LIMIT,
        });
    }
    Ok(())
}
