//! `sqlite:` URLs, read the way sqlx read them before this backend moved to rusqlite:
//! `sqlite://PATH`, `sqlite:PATH`, `sqlite::memory:`, with an optional `?mode=` of
//! `rwc` (the default: create if missing), `rw`, `ro` or `memory`. `cache=` is accepted
//! and ignored; any other parameter is refused. The path is percent-decoded.

use std::path::PathBuf;

use crate::error::{ContextError, Result};

/// Where a SQLite store lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// A private in-memory database: it exists as long as its one connection.
    Memory,
    File {
        path: PathBuf,
        create: bool,
        read_only: bool,
    },
}

pub(crate) fn parse(url: &str) -> Result<Target> {
    let unsupported = || ContextError::UnsupportedUrl(agent_redact::redact_url(url));
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .ok_or_else(unsupported)?;
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (mut create, mut read_only, mut memory) = (true, false, path == ":memory:");
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=').unwrap_or((pair, "")) {
            ("mode", "rwc") => {}
            ("mode", "rw") => create = false,
            ("mode", "ro") => (create, read_only) = (false, true),
            ("mode", "memory") => memory = true,
            ("cache", "shared" | "private") => {}
            _ => return Err(unsupported()),
        }
    }
    if memory {
        return Ok(Target::Memory);
    }
    let path = agent_redact::percent_decoded(path).ok_or_else(unsupported)?;
    if path.is_empty() {
        return Err(unsupported());
    }
    Ok(Target::File {
        path: PathBuf::from(path),
        create,
        read_only,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, create: bool, read_only: bool) -> Target {
        Target::File {
            path: PathBuf::from(path),
            create,
            read_only,
        }
    }

    #[test]
    fn forms() {
        assert_eq!(parse("sqlite::memory:").unwrap(), Target::Memory);
        assert_eq!(parse("sqlite://x.db?mode=memory").unwrap(), Target::Memory);
        assert_eq!(
            parse("sqlite:///tmp/a b.db").unwrap(),
            file("/tmp/a b.db", true, false)
        );
        assert_eq!(parse("sqlite:rel.db").unwrap(), file("rel.db", true, false));
        assert_eq!(
            parse("sqlite:///tmp/a%20b.db?mode=rw").unwrap(),
            file("/tmp/a b.db", false, false)
        );
        assert_eq!(
            parse("sqlite://c.db?mode=ro&cache=shared").unwrap(),
            file("c.db", false, true)
        );
        assert_eq!(
            parse("sqlite://50%.db").unwrap(),
            file("50%.db", true, false)
        );
        for bad in [
            "sqlite://",
            "sqlite:",
            "sqlite://x?mode=zz",
            "sqlite://x?foo=1",
            "x",
        ] {
            assert!(
                matches!(parse(bad), Err(ContextError::UnsupportedUrl(_))),
                "{bad}"
            );
        }
    }
}
