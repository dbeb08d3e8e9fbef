//! Paths as the kernel would resolve them, also where part of them is gone: a link that
//! dangles, a directory deleted since it was named.

use std::path::{Path, PathBuf};

/// The most links a path is followed through (Linux's own bound, `MAXSYMLINKS`).
const MAX_LINKS: usize = 40;

/// Where `path` leads once its last component is followed through every symlink, by hand
/// (`canonicalize` fails on a dangling one), with the rest resolved as [`as_far_as_exists`]
/// resolves it; and how many links were followed. None for a loop of links, or a missing
/// part that climbs (`..`).
pub fn followed(path: &Path) -> Option<(PathBuf, usize)> {
    let mut at = std::path::absolute(path).ok()?;
    for hops in 0..=MAX_LINKS {
        match std::fs::read_link(&at) {
            Ok(target) => {
                at = match at.parent() {
                    Some(dir) => dir.join(target),
                    None => target,
                };
            }
            Err(_) => return Some((as_far_as_exists(&at)?, hops)),
        }
    }
    None
}

/// `path` as a canonical path, also when it (and some of its parents) no longer exist: its
/// deepest existing ancestor, canonical, with the rest of the path. None when the missing
/// part climbs (`..`), which only the directories themselves could resolve.
pub fn as_far_as_exists(path: &Path) -> Option<PathBuf> {
    // Absolute (from the current directory) and without `.`: every component is a name.
    let path = std::path::absolute(path).ok()?;
    let mut missing = Vec::new();
    let mut at = path.as_path();
    loop {
        if let Ok(found) = std::fs::canonicalize(at) {
            return Some(
                missing
                    .iter()
                    .rev()
                    .fold(found, |path, part| path.join(part)),
            );
        }
        match at.components().next_back()? {
            std::path::Component::Normal(part) => missing.push(part),
            _ => return None,
        }
        at = at.parent()?;
    }
}
