//! The file descriptors `agentctl serve` may use.
//!
//! Every connection is a file descriptor. When the process runs out of them below the
//! configured connection cap, a new client is neither served nor refused: it waits in the
//! listen backlog. So at start the soft `RLIMIT_NOFILE` is raised to the hard one, and the
//! caps on connections and watchers are lowered to what the limit leaves after
//! [`RESERVE`] descriptors for everything else (the databases, the worker, the runtime).
//!
//! Invariant: [`fit`] never returns more connections than the limit minus the reserve (at
//! least [`MIN_CONNECTIONS`]), and always keeps a quarter of them for requests other than
//! event streams, so that a full set of watchers cannot shut out a plain request.

use agent_serve::Limits;
use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// Descriptors kept for what is not a connection.
pub(super) const RESERVE: u64 = 64;

/// The fewest connections a clamp leaves, however low the limit.
pub(super) const MIN_CONNECTIONS: usize = 4;

/// Raises the soft limit on open files to the hard one (as far as the kernel allows);
/// the soft limit in force afterwards, `None` when there is none.
pub(super) fn raise_open_files() -> Option<u64> {
    let limit = getrlimit(Resource::Nofile);
    if limit.current.is_some() && limit.current != limit.maximum {
        let raised = Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        if let Err(err) = setrlimit(Resource::Nofile, raised) {
            tracing::debug!(target: "agentctl::serve", %err, "cannot raise the open-file limit");
        }
    }
    getrlimit(Resource::Nofile).current
}

/// The caps that fit in `open_files` descriptors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Caps {
    /// Most event streams at once.
    pub watchers: usize,
    /// Most connections at once.
    pub connections: usize,
}

/// The caps for `watchers` event streams (and [`Limits::MAX_CONNECTIONS`] connections
/// besides) within `open_files`; `None` when they fit as they are (or there is no limit).
pub(super) fn fit(watchers: usize, open_files: Option<u64>) -> Option<Caps> {
    let wanted = watchers.saturating_add(Limits::MAX_CONNECTIONS);
    let budget = open_files?.saturating_sub(RESERVE);
    let budget = usize::try_from(budget).unwrap_or(usize::MAX);
    if budget >= wanted {
        return None;
    }
    let connections = budget.max(MIN_CONNECTIONS);
    let most_watchers = connections - connections / 4;
    Some(Caps {
        watchers: watchers.min(most_watchers).max(1),
        connections,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_fit_in_the_open_file_limit_less_the_reserve() {
        // Room for all: nothing changes.
        assert_eq!(fit(1024, Some(1_048_576)), None);
        assert_eq!(fit(1024, None), None);
        // 1024 files: 960 connections, three quarters of them at most watchers.
        assert_eq!(
            fit(1024, Some(1024)),
            Some(Caps {
                watchers: 720,
                connections: 960
            })
        );
        // Fewer watchers asked for than fit: kept.
        assert_eq!(
            fit(16, Some(1024)),
            Some(Caps {
                watchers: 16,
                connections: 960
            })
        );
        // A limit below the reserve still serves a few.
        assert_eq!(
            fit(1024, Some(10)),
            Some(Caps {
                watchers: 3,
                connections: MIN_CONNECTIONS
            })
        );
    }
}
