//! Flags shared by every subcommand.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;

/// Options that apply to every subcommand.
#[derive(Debug, Clone, Default, Args)]
pub struct GlobalArgs {
    /// Database URL: `sqlite://PATH`, `sqlite::memory:`, `postgres://...`, or a plain file
    /// path; `memory:` keeps the journal in this process only (journal and runtime commands;
    /// history and memory refuse it). Default: a SQLite file under the user's data
    /// directory, created on first use. Commands that keep nothing do not open it: mock,
    /// probe, trust, sandbox, demo gui and orchestrate, a `codex run` told not to journal,
    /// and the api stories (except a steer tied to a runtime turn, see `api steer --help`).
    /// Passwords in it are masked in every message.
    #[arg(
        long,
        global = true,
        env = "AGENTCTL_DB",
        hide_env_values = true,
        value_name = "URL"
    )]
    pub db: Option<String>,

    /// Print machine-readable JSON on stdout (one object per line for streams).
    #[arg(long, global = true)]
    pub json: bool,

    /// `db` came from `AGENTCTL_DB`, not the command line (set by `main` from clap's
    /// matches): a printed command then leaves `--db` to the environment.
    #[arg(skip)]
    pub db_from_env: bool,
}

impl GlobalArgs {
    /// How a command printed for the user starts: `agentctl`, with `--db` when this
    /// process was given one on the command line (a password in it masked, which
    /// [`note_masked_password`] says once), so that pasting the command reaches the same
    /// database. A database from `AGENTCTL_DB` is left to the environment, which gives the
    /// pasted command its real password too.
    pub fn command(&self) -> String {
        match &self.db {
            Some(db) if !self.db_from_env => {
                let shown = agent_redact::redact_url(db);
                if shown != *db {
                    PRINTED_MASKED.store(true, std::sync::atomic::Ordering::Relaxed);
                }
                format!("agentctl --db {}", shell_word(&shown))
            }
            _ => "agentctl".to_string(),
        }
    }

    /// A command for the user to paste: [`command`](Self::command), then `words`, each
    /// quoted for the shell when it needs it (ids and arguments may come from the model).
    pub fn suggest(&self, words: &[&str]) -> String {
        let mut command = self.command();
        for word in words {
            command.push(' ');
            command.push_str(&shell_word(word));
        }
        command
    }

    /// The database URL to open: `--db`/`AGENTCTL_DB`, or the default SQLite file.
    ///
    /// A bare path is taken as a SQLite file. The default file's folder is created here so
    /// that the first run on a fresh machine works.
    pub fn database_url(&self) -> anyhow::Result<String> {
        match &self.db {
            // `--db ''` or `AGENTCTL_DB=` read as `sqlite://`, and `' '` as a file named
            // so in the current directory.
            Some(url) if url.trim().is_empty() => Err(crate::output::UsageError(format!(
                "{} is empty; give a database URL (sqlite://PATH, postgres://...), or leave it out for the default database",
                if self.db_from_env {
                    "AGENTCTL_DB"
                } else {
                    "--db"
                }
            ))
            .into()),
            Some(url) if url.contains(':') && !looks_like_windows_path(url) => Ok(url.clone()),
            Some(path) => Ok(path_url(path)),
            None => {
                let path = default_db_path()?;
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir).with_context(|| {
                        format!("cannot create the data directory {}", dir.display())
                    })?;
                }
                Ok(path_url(&path.display().to_string()))
            }
        }
    }
}

/// Whether a command printed so far shows `--db` with a password masked.
static PRINTED_MASKED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Once the command is done: when a command it printed shows `--db` with its password
/// masked, one note saying so (pasted as it is, it would not authenticate).
pub fn note_masked_password() {
    if PRINTED_MASKED.load(std::sync::atomic::Ordering::Relaxed) {
        crate::output::note(
            "note: the --db password is masked (***) in the commands above; \
             type it there, or set AGENTCTL_DB and leave --db out",
        );
    }
}

/// The files of the SQLite database `url` names (absolute: the file, its WAL, shared-memory
/// and rollback journal), or none for another kind of database. A run's sandbox hides them:
/// they hold every run's journal, wherever `--db` puts them.
pub fn database_files(url: &str) -> Vec<PathBuf> {
    let Some(rest) = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
    else {
        return Vec::new();
    };
    let path = rest.split_once('?').map_or(rest, |(path, _)| path);
    if path.is_empty() || path == ":memory:" {
        return Vec::new();
    }
    // Decoded as the journal and the context store decode it.
    let Some(path) = agent_redact::percent_decoded(path) else {
        return Vec::new();
    };
    let Ok(file) = std::path::absolute(path) else {
        return Vec::new();
    };
    // SQLite keeps its side files beside the file a symlink names, not beside the link.
    let resolved = agent_host::paths::followed(&file)
        .map(|(real, _)| real)
        .filter(|real| *real != file);
    let mut files = Vec::new();
    for file in std::iter::once(file).chain(resolved) {
        files.push(file.clone());
        for suffix in ["-wal", "-shm", "-journal"] {
            let mut name = file.clone().into_os_string();
            name.push(suffix);
            files.push(PathBuf::from(name));
        }
    }
    files
}

/// The `sqlite://` URL of a plain file path: its `%` and `?` escaped, since the stores
/// decode `%XX` escapes and end the path at `?` (a path `x%41.db` named `xA.db` for the
/// context store and `x%41.db` for the journal: two files for one `--db`).
fn path_url(path: &str) -> String {
    let mut url = String::from("sqlite://");
    for c in path.chars() {
        match c {
            '%' => url.push_str("%25"),
            '?' => url.push_str("%3F"),
            c => url.push(c),
        }
    }
    url
}

fn looks_like_windows_path(s: &str) -> bool {
    let bytes = s.as_bytes();
    bytes.len() > 2 && bytes[1] == b':' && (bytes[2] == b'\\' || bytes[2] == b'/')
}

/// `$XDG_DATA_HOME/agentctl/agentctl.db` (or the platform's equivalent).
pub fn default_db_path() -> anyhow::Result<PathBuf> {
    let base = dirs::data_dir()
        .or_else(|| dirs::home_dir().map(|home| home.join(".local/share")))
        .context("cannot find a data directory for the default database; pass --db URL")?;
    Ok(base.join("agentctl").join("agentctl.db"))
}

/// `word` as one shell word: as it is when it has only characters no shell reads, else in
/// single quotes; a word with control characters (a model's call id may hold an escape
/// sequence or a newline) in bash's `$'...'`, where they are written out (`\x1b`, `\n`):
/// pasted, it is the same word, and printed, it cannot drive the terminal.
fn shell_word(word: &str) -> String {
    use std::fmt::Write as _;
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/:._-@=+,".contains(c));
    if plain {
        return word.to_string();
    }
    if !word.chars().any(|c| c.is_control() || invisible(c)) {
        return format!("'{}'", word.replace('\'', "'\\''"));
    }
    let mut quoted = String::from("$'");
    for c in word.chars() {
        match c {
            '\\' => quoted.push_str("\\\\"),
            '\'' => quoted.push_str("\\'"),
            '\n' => quoted.push_str("\\n"),
            '\t' => quoted.push_str("\\t"),
            '\r' => quoted.push_str("\\r"),
            c if c.is_control() && c.is_ascii() => {
                let _ = write!(quoted, "\\x{:02x}", u32::from(c));
            }
            c if c.is_control() || (invisible(c) && u32::from(c) <= 0xffff) => {
                let _ = write!(quoted, "\\u{:04x}", u32::from(c));
            }
            c if invisible(c) => {
                let _ = write!(quoted, "\\U{:08x}", u32::from(c));
            }
            c => quoted.push(c),
        }
    }
    quoted.push('\'');
    quoted
}

/// Whether `c` shows as nothing (or as a blank) in a terminal: zero-width spaces and
/// joiners, direction marks and overrides, the soft hyphen, variation selectors, tags,
/// fillers. A model's call id `c1` and `c1` followed by one of them print alike; written
/// out in a suggested command, the two read apart and paste back as they are.
fn invisible(c: char) -> bool {
    matches!(
        c,
        '\u{ad}'
            | '\u{34f}'
            | '\u{61c}'
            | '\u{115f}'..='\u{1160}'
            | '\u{17b4}'..='\u{17b5}'
            | '\u{180b}'..='\u{180f}'
            | '\u{200b}'..='\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2060}'..='\u{206f}'
            | '\u{3164}'
            | '\u{fe00}'..='\u{fe0f}'
            | '\u{feff}'
            | '\u{ffa0}'
            | '\u{fff0}'..='\u{fff8}'
            | '\u{e0000}'..='\u{e0fff}'
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sqlite_database_is_its_file_and_the_files_beside_it() {
        let files = database_files("sqlite:///data/a.db?mode=rwc");
        let want: Vec<PathBuf> = [
            "/data/a.db",
            "/data/a.db-wal",
            "/data/a.db-shm",
            "/data/a.db-journal",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(files, want);
        assert_eq!(
            database_files("sqlite:rel.db")[0],
            std::path::absolute("rel.db").unwrap()
        );
        for none in [
            "sqlite::memory:",
            "memory:",
            "postgres://u:p@h/db",
            "sqlite://",
        ] {
            assert!(database_files(none).is_empty(), "{none}");
        }
    }

    #[test]
    fn printed_commands_carry_the_database_quoted_and_masked() {
        let with = |db: Option<&str>| GlobalArgs {
            db: db.map(str::to_string),
            ..GlobalArgs::default()
        };
        assert_eq!(with(None).command(), "agentctl");
        assert_eq!(
            with(Some("sqlite:///tmp/x y.db")).command(),
            "agentctl --db 'sqlite:///tmp/x y.db'"
        );
        let pg = with(Some("postgres://ana:secret@db/agents")).command();
        assert!(!pg.contains("secret"), "{pg}");
        assert_eq!(pg, "agentctl --db 'postgres://ana:***@db/agents'");
        // From the environment, the database is the environment's to give.
        let from_env = GlobalArgs {
            db_from_env: true,
            ..with(Some("postgres://ana:secret@db/agents"))
        };
        assert_eq!(from_env.command(), "agentctl");
    }

    #[test]
    fn suggested_commands_quote_every_word() {
        let global = GlobalArgs::default();
        assert_eq!(
            global.suggest(&["approve", "r1", "c1 $(touch /tmp/x)", "--sha256", "ab"]),
            "agentctl approve r1 'c1 $(touch /tmp/x)' --sha256 ab"
        );
        assert_eq!(
            global.suggest(&["deny", "r1", "it's"]),
            "agentctl deny r1 'it'\\''s'"
        );
        // Control characters are written out, so that pasting gives back the same word.
        assert_eq!(
            global.suggest(&["deny", "r1", "c\u{1b}[31m\n'\\\u{9b}"]),
            "agentctl deny r1 $'c\\x1b[31m\\n\\'\\\\\\u009b'"
        );
        // So are characters that print as nothing: `c1` and `c1` + U+200B read apart.
        assert_eq!(
            global.suggest(&["approve", "r1", "c1\u{200b}", "x\u{e0041}"]),
            "agentctl approve r1 $'c1\\u200b' $'x\\U000e0041'"
        );
    }
}
