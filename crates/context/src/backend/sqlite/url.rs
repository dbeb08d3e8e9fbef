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
        mode: FileMode,
    },
}

/// How a store's file is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FileMode {
    /// Read and write, creating the file if it is missing (`mode=rwc`, the default).
    Create,
    /// Read and write an existing file (`mode=rw`).
    Write,
    /// Read only (`mode=ro`): sees the commits of writers elsewhere, but needs the `-shm`
    /// file of a WAL database, which SQLite makes if it is missing.
    Read,
    /// Read only, `immutable=1`: no `-shm` file and no locks. Only for a file whose `-wal`
    /// holds no commits (then the main file holds them all), which nothing writes meanwhile.
    Immutable,
}

impl FileMode {
    pub(crate) fn writes(self) -> bool {
        matches!(self, FileMode::Create | FileMode::Write)
    }
}

impl Target {
    /// Whether this store's connections only read.
    pub(crate) fn read_only(&self) -> bool {
        matches!(self, Target::File { mode, .. } if !mode.writes())
    }
}

pub(crate) fn parse(url: &str) -> Result<Target> {
    let unsupported = || ContextError::UnsupportedUrl(agent_redact::redact_url(url));
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .ok_or_else(unsupported)?;
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (mut mode, mut memory) = (FileMode::Create, path == ":memory:");
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=').unwrap_or((pair, "")) {
            ("mode", "rwc") => mode = FileMode::Create,
            ("mode", "rw") => mode = FileMode::Write,
            ("mode", "ro") => mode = FileMode::Read,
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
        mode,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, mode: FileMode) -> Target {
        Target::File {
            path: PathBuf::from(path),
            mode,
        }
    }

    #[test]
    fn forms() {
        assert_eq!(parse("sqlite::memory:").unwrap(), Target::Memory);
        assert_eq!(parse("sqlite://x.db?mode=memory").unwrap(), Target::Memory);
        assert_eq!(
            parse("sqlite:///tmp/a b.db").unwrap(),
            file("/tmp/a b.db", FileMode::Create)
        );
        assert_eq!(
            parse("sqlite:rel.db").unwrap(),
            file("rel.db", FileMode::Create)
        );
        assert_eq!(
            parse("sqlite:///tmp/a%20b.db?mode=rw").unwrap(),
            file("/tmp/a b.db", FileMode::Write)
        );
        assert_eq!(
            parse("sqlite://c.db?mode=ro&cache=shared").unwrap(),
            file("c.db", FileMode::Read)
        );
        assert_eq!(
            parse("sqlite://50%.db").unwrap(),
            file("50%.db", FileMode::Create)
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
