//! Landlock only allows: a path is hidden inside a readable tree by allowing its siblings,
//! and the siblings of each of its ancestors, one by one instead of the tree as a whole.
//! Used only where hidden paths cannot be covered by mounts (no mount namespace to be had).

use std::path::{Path, PathBuf};

/// The roots to allow reading so that everything under `root` is readable except `deny`
/// (and what lies beneath). `children` lists a directory's entries (an unreadable directory
/// lists none). The cost: a directory on the way to a hidden path cannot be listed itself,
/// and an entry created in it after the sandbox started cannot be read.
pub fn readable_roots(
    root: &Path,
    deny: &[PathBuf],
    children: &dyn Fn(&Path) -> Vec<PathBuf>,
) -> Vec<PathBuf> {
    let mut out = Vec::new();
    walk(root, deny, children, &mut out);
    out
}

fn walk(
    dir: &Path,
    deny: &[PathBuf],
    children: &dyn Fn(&Path) -> Vec<PathBuf>,
    out: &mut Vec<PathBuf>,
) {
    if deny.iter().any(|d| d == dir) {
        return;
    }
    if !deny.iter().any(|d| d.starts_with(dir)) {
        out.push(dir.to_path_buf());
        return;
    }
    for child in children(dir) {
        walk(&child, deny, children, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(dir: &Path) -> Vec<PathBuf> {
        let names: &[&str] = match dir.to_str() {
            Some("/") => &["/etc", "/home", "/usr"],
            Some("/home") => &["/home/u"],
            Some("/home/u") => &["/home/u/.ssh", "/home/u/src", "/home/u/.netrc"],
            _ => &[],
        };
        names.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn a_hidden_path_leaves_its_siblings_and_its_ancestors_siblings_readable() {
        let deny = vec![
            PathBuf::from("/home/u/.ssh"),
            PathBuf::from("/home/u/.netrc"),
        ];
        let roots = readable_roots(Path::new("/"), &deny, &tree);
        let want: Vec<PathBuf> = ["/etc", "/home/u/src", "/usr"]
            .iter()
            .map(PathBuf::from)
            .collect();
        assert_eq!(roots, want);
    }

    #[test]
    fn nothing_hidden_is_one_root() {
        let roots = readable_roots(Path::new("/"), &[PathBuf::from("/opt/x")], &tree);
        assert_eq!(
            roots,
            vec![
                PathBuf::from("/etc"),
                PathBuf::from("/home"),
                PathBuf::from("/usr")
            ]
        );
        assert_eq!(
            readable_roots(Path::new("/"), &[], &tree),
            vec![PathBuf::from("/")]
        );
    }
}
