//! The user's home and data directories, found the way agentctl finds its own configuration
//! and database (the `dirs` crate's way), so that what the sandbox hides is where they are:
//! `HOME` when it is set and not empty, else the user's entry in the password database (a
//! service manager, `env -i` or `sudo` may start agentctl without `HOME`).

use std::ffi::OsString;
use std::path::PathBuf;

/// The home directory: `HOME` when set and not empty, else the password database's entry
/// of this process's effective user.
pub fn home_dir() -> Option<PathBuf> {
    home_from(std::env::var_os("HOME"), passwd_home)
}

/// The data directory (where agentctl keeps its database by default): `XDG_DATA_HOME` when
/// it is an absolute path, else `.local/share` in [`home_dir`].
pub fn data_dir() -> Option<PathBuf> {
    data_from(std::env::var_os("XDG_DATA_HOME"), home_dir)
}

fn home_from(var: Option<OsString>, passwd: impl FnOnce() -> Option<PathBuf>) -> Option<PathBuf> {
    var.filter(|home| !home.is_empty())
        .map(PathBuf::from)
        .or_else(passwd)
}

fn data_from(var: Option<OsString>, home: impl FnOnce() -> Option<PathBuf>) -> Option<PathBuf> {
    var.map(PathBuf::from)
        .filter(|dir| dir.is_absolute())
        .or_else(|| home().map(|home| home.join(".local/share")))
}

#[cfg(target_os = "linux")]
fn passwd_home() -> Option<PathBuf> {
    let user = nix::unistd::User::from_uid(nix::unistd::geteuid()).ok()??;
    Some(user.dir).filter(|dir| !dir.as_os_str().is_empty())
}

#[cfg(not(target_os = "linux"))]
fn passwd_home() -> Option<PathBuf> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn passwd() -> Option<PathBuf> {
        Some(PathBuf::from("/home/from-passwd"))
    }

    #[test]
    fn an_unset_or_empty_home_falls_back_to_the_password_database() {
        let home = |var: Option<&str>| home_from(var.map(OsString::from), passwd);
        assert_eq!(home(Some("/home/u")), Some(PathBuf::from("/home/u")));
        assert_eq!(home(None), passwd());
        assert_eq!(home(Some("")), passwd());
        assert_eq!(home_from(None, || None), None);
    }

    #[test]
    fn the_data_dir_is_an_absolute_xdg_data_home_or_the_homes_own() {
        let data = |var: Option<&str>| data_from(var.map(OsString::from), passwd);
        assert_eq!(data(Some("/data")), Some(PathBuf::from("/data")));
        let own = Some(PathBuf::from("/home/from-passwd/.local/share"));
        assert_eq!(data(None), own);
        assert_eq!(data(Some("relative")), own);
        assert_eq!(data(Some("")), own);
    }
}
