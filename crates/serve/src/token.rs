//! The access token: random per start unless a file gives it; compared in constant time;
//! never printed by `Debug`.

use std::fmt;

/// What the name of the cookie the console's sign-in link sets starts with; the listen
/// port follows ([`cookie_name`]).
pub const COOKIE_PREFIX: &str = "agentctl_token_";

/// The console's cookie of a server on `port`: `agentctl_token_PORT`. Browsers send a
/// cookie to every port of a host, so one name for all would let two servers on one
/// machine overwrite each other's cookie (signing each other's console out).
pub fn cookie_name(port: u16) -> String {
    format!("{COOKIE_PREFIX}{port}")
}

/// The shortest token a `--token-file` may hold.
pub const MIN_LEN: usize = 32;

/// A secret that grants every route.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(***)")
    }
}

/// Why a token file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// It cannot be read.
    #[error("cannot read the token file {path}: {reason}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// Its first line is too short, or holds characters a header or cookie cannot carry.
    #[error(
        "the token in {path} must be at least {MIN_LEN} characters of letters, digits, `-`, `_` or `.`"
    )]
    Weak {
        /// The file.
        path: String,
    },
}

impl Token {
    /// A new random token (244 bits from the OS's generator).
    pub fn random() -> Token {
        Token(format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        ))
    }

    /// The first line of `path`.
    pub fn from_file(path: &std::path::Path) -> Result<Token, TokenError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|err| TokenError::Read {
            path: shown.clone(),
            reason: err.to_string(),
        })?;
        let line = text.lines().next().unwrap_or("").trim();
        let fits = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
        if line.len() < MIN_LEN || !line.chars().all(fits) {
            return Err(TokenError::Weak { path: shown });
        }
        Ok(Token(line.to_string()))
    }

    /// The token's text, to print the console link once.
    pub fn reveal(&self) -> &str {
        &self.0
    }

    /// Whether `given` is this token, in time that depends only on their lengths.
    pub fn matches(&self, given: &str) -> bool {
        let (a, b) = (self.0.as_bytes(), given.as_bytes());
        if a.len() != b.len() {
            return false;
        }
        a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn matches_only_itself_and_hides_in_debug() {
        let t = Token::random();
        assert_eq!(t.reveal().len(), 64);
        assert!(t.matches(t.reveal()));
        assert!(!t.matches(""));
        assert!(!t.matches(&t.reveal()[1..]));
        let mut other = t.reveal().to_string();
        other.replace_range(63.., if other.ends_with('0') { "1" } else { "0" });
        assert!(!t.matches(&other));
        assert_ne!(Token::random(), t);
        assert!(!format!("{t:?}").contains(t.reveal()));
    }

    #[test]
    fn a_token_file_must_hold_a_strong_token() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        std::fs::write(&path, "short\n").unwrap();
        assert!(matches!(
            Token::from_file(&path),
            Err(TokenError::Weak { .. })
        ));
        std::fs::write(&path, format!("{}\n", "a b".repeat(20))).unwrap();
        assert!(matches!(
            Token::from_file(&path),
            Err(TokenError::Weak { .. })
        ));
        let good = "k".repeat(40);
        std::fs::write(&path, format!("{good}\nignored\n")).unwrap();
        assert_eq!(Token::from_file(&path).unwrap().reveal(), good);
        assert!(matches!(
            Token::from_file(&dir.path().join("missing")),
            Err(TokenError::Read { .. })
        ));
    }
}
