//! One-time sign-in codes, for links that pass through other programs.
//!
//! `serve --open` hands the console's address to `xdg-open`, and from there to a browser:
//! both show their arguments to every local user (`ps`, `/proc/PID/cmdline`) for as long as
//! they run, and a browser keeps the address in its history. A link with the token in it
//! would give the server away to anyone who read it; a link with a code signs in one
//! browser, once, within [`CODE_TTL`], and is worthless afterwards.
//!
//! Invariants: a code is redeemed at most once; an expired code never signs in; at most
//! [`MAX_CODES`] are outstanding (issuing another forgets the oldest); codes are compared
//! in time that depends only on their lengths.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::token::Token;

/// How long a code may wait to be redeemed (a browser starting up takes a few seconds).
pub const CODE_TTL: Duration = Duration::from_secs(120);

/// Most codes outstanding at once.
const MAX_CODES: usize = 8;

/// The codes issued and not redeemed yet.
#[derive(Default)]
pub(crate) struct OnceCodes {
    codes: Mutex<Vec<(Token, Instant)>>,
}

impl OnceCodes {
    /// The outstanding codes (no code panics while holding the lock, so a poisoned one's
    /// list is whole).
    fn codes(&self) -> std::sync::MutexGuard<'_, Vec<(Token, Instant)>> {
        self.codes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A new code, good once within [`CODE_TTL`].
    pub(crate) fn issue(&self) -> String {
        let code = Token::random();
        let text = code.reveal().to_string();
        let mut codes = self.codes();
        if codes.len() >= MAX_CODES {
            codes.remove(0);
        }
        codes.push((code, Instant::now()));
        text
    }

    /// Whether `given` is an outstanding code issued less than [`CODE_TTL`] ago; a code
    /// that matches is used up, and every expired code is forgotten.
    pub(crate) fn redeem(&self, given: &str) -> bool {
        let mut codes = self.codes();
        codes.retain(|(_, issued)| issued.elapsed() < CODE_TTL);
        match codes.iter().position(|(code, _)| code.matches(given)) {
            Some(at) => {
                codes.remove(at);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_code_signs_in_once_and_only_a_recent_one_is_kept() {
        let once = OnceCodes::default();
        let code = once.issue();
        assert!(!once.redeem(""));
        assert!(!once.redeem(&code[1..]));
        assert!(once.redeem(&code));
        assert!(!once.redeem(&code), "used up");
        let codes: Vec<String> = (0..=MAX_CODES).map(|_| once.issue()).collect();
        assert!(!once.redeem(&codes[0]), "the oldest was forgotten");
        assert!(once.redeem(&codes[MAX_CODES]));
        // An expired one: issued, then dated back past the TTL.
        let late = once.issue();
        if let Some(back) = Instant::now().checked_sub(CODE_TTL) {
            once.codes.lock().unwrap().last_mut().unwrap().1 = back;
            assert!(!once.redeem(&late));
        }
    }
}
