//! The host's Unix sockets, for a command without the network.
//!
//! Landlock does not govern `connect` on a Unix socket reached by path, and seccomp cannot
//! read the address a `connect` names, so with the network off a command could still talk
//! to every daemon of the host that listens on one: the init system and the desktop bus
//! (as root, a unit started outside the sandbox), a terminal multiplexer (keys typed into
//! the user's shell), a display server, an agent holding keys, a database, a browser that
//! fetches what it is handed. Without the network, every socket the host has bound by
//! path is covered in the sandbox's mount namespace, so a connection is refused.
//!
//! Invariants:
//! - The list is the kernel's own (`/proc/net/unix` of the host's network namespace: every
//!   socket bound by path, listening or not), read when the sandbox is set up, not a walk
//!   of the file system; a socket bound later (by the command, or by the host after the
//!   command started) is not in it.
//! - Kept reachable: sockets beneath a path the policy names (the workspace, the writable
//!   roots, the temp dir: the user put them there) and the name services' lookup sockets
//!   ([`NAME_SERVICES`]), without which a command cannot name users and groups on a host
//!   whose accounts come from a directory service.
//! - Only what is a socket where the path leads now is covered: a path the kernel lists
//!   that was removed, renamed over or bound in another mount namespace is left as it is.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::FileTypeExt as _;
use std::path::{Path, PathBuf};

use super::apply_err;
use crate::SandboxError;

/// The kernel's table of the Unix sockets of this network namespace.
const TABLE: &str = "/proc/net/unix";

/// Sockets that answer user and group lookups (nscd, SSSD's NSS responder, systemd's
/// user database): read-only queries the C library makes for `ls -l`, `id` or `git`.
const NAME_SERVICES: [&str; 3] = [
    "/run/nscd/socket",
    "/var/lib/sss/pipes/nss",
    "/run/systemd/userdb/",
];

/// The host's sockets bound by path, as they resolve now, except those beneath
/// `reachable` and the name services'.
pub(crate) fn host_sockets(reachable: &[PathBuf]) -> Result<Vec<PathBuf>, SandboxError> {
    let table = std::fs::read(TABLE).map_err(apply_err("read the host's Unix sockets"))?;
    let mut sockets: Vec<PathBuf> = bound_paths(&table)
        .into_iter()
        .filter_map(|path| std::fs::canonicalize(path).ok())
        .filter(|path| !reachable.iter().any(|r| path.starts_with(r)))
        .filter(|path| !is_name_service(path))
        .filter(|path| std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()))
        .collect();
    sockets.sort();
    sockets.dedup();
    Ok(sockets)
}

fn is_name_service(path: &Path) -> bool {
    NAME_SERVICES
        .iter()
        .any(|known| match known.strip_suffix('/') {
            Some(dir) => path.starts_with(dir),
            None => path == Path::new(known),
        })
}

/// The absolute paths of a `/proc/net/unix` table: the text after its seventh field
/// (`Num RefCount Protocol Flags Type St Inode`), when it starts with `/`. Abstract
/// sockets (`@name`) and unbound ones (no path) are not files; Landlock's scope keeps the
/// abstract ones out of reach.
fn bound_paths(table: &[u8]) -> Vec<&Path> {
    table
        .split(|b| *b == b'\n')
        .skip(1)
        .filter_map(|line| {
            let mut rest = line;
            for _ in 0..7 {
                let start = rest.iter().position(|b| *b != b' ')?;
                let field = rest.get(start..)?;
                let end = field.iter().position(|b| *b == b' ')?;
                rest = field.get(end + 1..)?;
            }
            rest.starts_with(b"/")
                .then(|| Path::new(OsStr::from_bytes(rest)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_paths_are_read_from_the_table_spaces_kept() {
        let table = b"Num       RefCount Protocol Flags    Type St Inode Path\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 11234156 /var/run/postgresql/.s.PGSQL.5432\n\
            0000000000000000: 00000002 00000000 00000000 0002 01    20480 /run/with space/s\n\
            0000000000000000: 00000002 00000000 00010000 0001 01    20481 @abstract\n\
            0000000000000000: 00000003 00000000 00000000 0001 03    20482\n\
            0000000000000000: 00000003 00000000 00000000 0001 03    20483 relative.sock\n\
            short line\n";
        let paths: Vec<&Path> = bound_paths(table);
        assert_eq!(
            paths,
            [
                Path::new("/var/run/postgresql/.s.PGSQL.5432"),
                Path::new("/run/with space/s"),
            ]
        );
    }

    #[test]
    fn name_service_sockets_are_known_by_path_or_directory() {
        assert!(is_name_service(Path::new("/run/nscd/socket")));
        assert!(is_name_service(Path::new(
            "/run/systemd/userdb/io.systemd.Multiplexer"
        )));
        assert!(!is_name_service(Path::new("/run/systemd/private")));
        assert!(!is_name_service(Path::new("/run/nscd/socket2")));
    }

    #[test]
    fn a_live_listener_outside_is_listed_and_one_beneath_a_reachable_path_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let (inside, outside) = (root.join("ws"), root.join("out"));
        std::fs::create_dir_all(&inside).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        let _a = std::os::unix::net::UnixListener::bind(inside.join("a.sock")).unwrap();
        let _b = std::os::unix::net::UnixListener::bind(outside.join("b.sock")).unwrap();
        let listed = host_sockets(std::slice::from_ref(&inside)).unwrap();
        assert!(listed.contains(&outside.join("b.sock")), "{listed:?}");
        assert!(!listed.iter().any(|p| p.starts_with(&inside)), "{listed:?}");
    }
}
