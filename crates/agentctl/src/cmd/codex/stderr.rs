//! Where `codex app-server`'s stderr goes: to ours with `RUST_LOG` set (Codex logs noisily
//! there), otherwise into a temporary file that only an error reads, so that a server that
//! exits at once is explained by its own last words instead of "run again with RUST_LOG".
//!
//! The file is written by the child directly, so whatever it wrote before its exit is there
//! once we see that exit. It is removed when the [`ServerStderr`] is dropped.

use std::io::{Read as _, Seek as _, SeekFrom};

use agent_appserver::StderrTarget;

/// Bytes read from the end of the file.
const TAIL_BYTES: u64 = 2048;
/// Lines of that shown.
const TAIL_LINES: usize = 8;

/// The server's stderr for one command.
#[derive(Debug)]
pub struct ServerStderr {
    kept: Option<tempfile::NamedTempFile>,
    shown: bool,
}

impl ServerStderr {
    /// Shown with `RUST_LOG` set; otherwise kept in a temporary file (discarded when none
    /// can be made).
    pub fn new() -> ServerStderr {
        let shown = std::env::var_os("RUST_LOG").is_some();
        let kept = if shown {
            None
        } else {
            tempfile::Builder::new()
                .prefix("agentctl-codex-stderr-")
                .tempfile()
                .ok()
        };
        ServerStderr { kept, shown }
    }

    /// What the server's command is given.
    pub fn target(&self) -> StderrTarget {
        match (&self.kept, self.shown) {
            (Some(file), _) => StderrTarget::File(file.path().to_path_buf()),
            (None, true) => StderrTarget::Inherit,
            (None, false) => StderrTarget::Null,
        }
    }

    /// The last lines the server wrote, each indented, the value of `OPENAI_API_KEY` masked;
    /// `None` when it wrote nothing (or its stderr was not kept).
    pub fn tail(&self) -> Option<String> {
        let mut file = std::fs::File::open(self.kept.as_ref()?.path()).ok()?;
        let len = file.metadata().ok()?.len();
        file.seek(SeekFrom::Start(len.saturating_sub(TAIL_BYTES)))
            .ok()?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).ok()?;
        tail_of(&String::from_utf8_lossy(&bytes), secret().as_deref())
    }
}

/// The key a server might echo, if any.
fn secret() -> Option<String> {
    std::env::var("OPENAI_API_KEY")
        .ok()
        .filter(|key| !key.trim().is_empty())
}

/// The last [`TAIL_LINES`] non-blank lines of `text`, indented, with `secret` masked.
fn tail_of(text: &str, secret: Option<&str>) -> Option<String> {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let shown = &lines[lines.len().saturating_sub(TAIL_LINES)..];
    if shown.is_empty() {
        return None;
    }
    let mut tail = shown
        .iter()
        .map(|line| format!("    {}", line.trim_end()))
        .collect::<Vec<_>>()
        .join("\n");
    if let Some(secret) = secret {
        tail = tail.replace(secret, "***");
    }
    Some(tail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_is_the_last_lines_indented_with_the_key_masked() {
        let text = (1..=12)
            .map(|n| format!("line {n} sk-abc\n\n"))
            .collect::<String>();
        let tail = tail_of(&text, Some("sk-abc")).unwrap();
        let lines: Vec<&str> = tail.lines().collect();
        assert_eq!(lines.len(), TAIL_LINES);
        assert_eq!(lines[0], "    line 5 ***");
        assert_eq!(lines[7], "    line 12 ***");
        assert_eq!(tail_of(" \n\n", None), None);
    }
}
