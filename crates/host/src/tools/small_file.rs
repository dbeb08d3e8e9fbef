//! Settings files the host reads (`agentctl.toml`, the user's `config.toml`, the trust
//! store), read with a bound.
//!
//! Invariants:
//! - Only a regular file is read: a workspace can ship its `agentctl.toml` as a link to a
//!   FIFO (the read would block for ever) or to `/dev/zero` (it would never end). The file
//!   is opened without blocking, and what was opened is checked, not the path.
//! - At most [`MAX_BYTES`] are read; a longer file is refused unread past the bound.

use std::io::Read as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

/// The largest settings file read (a trust store of some 20,000 workspaces).
pub(crate) const MAX_BYTES: u64 = 4 << 20;

/// `path`'s text, `None` when there is no such file; otherwise why it cannot be read.
pub(crate) fn read_optional(path: &Path) -> Result<Option<String>, String> {
    let nonblocking = i32::try_from(rustix::fs::OFlags::NONBLOCK.bits()).unwrap_or(0);
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nonblocking)
        .open(path)
    {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(err.to_string()),
    };
    let meta = file.metadata().map_err(|err| err.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    let mut bytes = Vec::new();
    file.take(MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|err| err.to_string())?;
    if bytes.len() as u64 > MAX_BYTES {
        return Err(format!(
            "over {MAX_BYTES} bytes, more than a settings file holds"
        ));
    }
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| "not UTF-8 text".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_regular_file_within_the_bound_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f.toml");
        assert_eq!(read_optional(&file).unwrap(), None);
        std::fs::write(&file, "a = 1\n").unwrap();
        assert_eq!(read_optional(&file).unwrap().as_deref(), Some("a = 1\n"));
        // A FIFO is refused at once, not waited on for a writer.
        let fifo = dir.path().join("fifo");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .unwrap();
        assert_eq!(read_optional(&fifo).unwrap_err(), "not a regular file");
        // A link to a device that never ends is refused unread.
        let zero = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        assert_eq!(read_optional(&zero).unwrap_err(), "not a regular file");
        // A file over the bound is refused; one at it is read.
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'#'; MAX_BYTES as usize + 1]).unwrap();
        assert!(read_optional(&big).unwrap_err().contains("over"));
        std::fs::write(&big, vec![b'#'; MAX_BYTES as usize]).unwrap();
        assert_eq!(
            read_optional(&big).unwrap().unwrap().len(),
            MAX_BYTES as usize
        );
        std::fs::write(&file, [0xff, 0xfe]).unwrap();
        assert_eq!(read_optional(&file).unwrap_err(), "not UTF-8 text");
    }
}
