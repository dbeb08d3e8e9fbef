//! Fuzz target `redact`: database URLs and their redaction.
//!
//! Properties:
//! 1. Any string: `redact_url`, `passwords`, `redact_in` and `percent_decoded` return
//!    (no panic, bounded time), and the output is at most 3 times the input (a mask of 3
//!    bytes replaces at least one byte).
//! 2. A URL built around a known password (userinfo or `password=`/`sslpassword=` query
//!    parameter; with `@ / ? # : % =`, unicode, spaces, percent escapes; hosts empty, as in
//!    the `@/db?host=/socket` form, or not): the password, where it occurs only once in
//!    the URL, never survives `redact_url`, nor stands as a whole token in `redact_in` of a
//!    message quoting the URL and the password (the quotation reads as `redact_url`'s).
//! 3. The stored fuzz corpus (`fixtures/fuzz/redact/*.url`) passes 1, and 2 for every password
//!    `passwords` finds.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may unwrap

use std::time::{Duration, Instant};

use agent_fuzzkit::{config, corpus, keep_if_failing, within};
use agent_redact::{MASK, passwords, percent_decoded, redact_in, redact_url};
use proptest::prelude::*;

const TARGET: &str = "redact";
const BOUND: Duration = Duration::from_secs(2);

fn check_any(text: &str) -> Result<(), TestCaseError> {
    let start = Instant::now();
    let shown = redact_url(text);
    prop_assert!(
        shown.len() <= 3 * text.len().max(1),
        "{} -> {}",
        text.len(),
        shown.len()
    );
    let found = passwords(text);
    for secret in &found {
        prop_assert!(!secret.is_empty());
        prop_assert!(text.contains(secret));
    }
    let message = format!("cannot open {text}: {}", found.join(" "));
    let masked = redact_in(&message, text);
    prop_assert!(masked.len() <= 3 * message.len().max(1));
    let _ = percent_decoded(text);
    within(start, BOUND, "redaction")?;
    // Every password found, when it occurs once, is gone.
    for secret in found {
        if text.matches(secret).count() == 1 && !secret.contains('*') {
            prop_assert!(
                !shown.contains(secret),
                "{text:?} -> {shown:?} keeps {secret:?}"
            );
        }
    }
    Ok(())
}

/// `secret` is at one place in `url`: it must not survive redaction there.
fn check_secret(url: &str, secret: &str) -> Result<(), TestCaseError> {
    if secret.is_empty() || secret.contains('*') || url.matches(secret).count() != 1 {
        return Ok(()); // not checkable: it also occurs where it is no secret
    }
    let shown = redact_url(url);
    prop_assert!(
        !shown.contains(secret),
        "{url:?} -> {shown:?} keeps {secret:?}"
    );
    // `redact_in` masks the passwords as `passwords` reads them; where the URL is
    // ambiguous that is a longer text than the generated one (masking too much in the
    // URL), so a bare quotation of the generated one is checked only when they agree.
    let found = passwords(url);
    let message = format!(
        "error returned from database: {url} (password {secret}; {})",
        found.join(" ")
    );
    let masked = redact_in(&message, url);
    prop_assert!(masked.contains(MASK));
    // The quotation is the redacted URL; after it, every password stood as a whole token.
    let shown_at = masked.find(&shown);
    prop_assert!(shown_at.is_some(), "{message:?} -> {masked:?}");
    let tail = shown_at.unwrap_or(0) + shown.len();
    for secret in found.iter().copied().chain(Some(secret)) {
        if found.contains(&secret) && !secret.contains('*') {
            prop_assert!(
                !has_token(&masked, tail, secret),
                "{message:?} -> {masked:?}"
            );
        }
    }
    Ok(())
}

/// Whether `secret` occurs in `text` from byte `from` on with no alphanumeric, `_` or `-`
/// on either side. A mask beside it counts as a word character: there it stood beside
/// another password, not as a token of its own (masking the neighbour made the boundary).
fn has_token(text: &str, from: usize, secret: &str) -> bool {
    let word = |c: char| c.is_alphanumeric() || c == '_' || c == '-' || c == '*';
    text.match_indices(secret).any(|(at, _)| {
        if at < from {
            return false;
        }
        let before = text[..at].chars().next_back();
        let after = text[at + secret.len()..].chars().next();
        !before.is_some_and(word) && !after.is_some_and(word)
    })
}

// ---- generators ----

/// Password text: anything but `*` (the mask's own character), awkward characters likely.
fn secret(query: bool) -> impl Strategy<Value = String> {
    let pieces = prop_oneof![
        4 => "[A-Za-z0-9]{1,4}",
        2 => prop::sample::select(vec!["@", "/", "?", "#", ":", "%", "=", "&", " ", "+", ";", "\\", "[", "]"])
            .prop_map(str::to_owned),
        1 => "%[0-9a-fA-F]{2}",
        1 => "%[g-z]{0,2}",
        1 => prop::sample::select(vec!["ä", "😀", "数", "\u{0}", "\u{feff}", "\u{202e}"]).prop_map(str::to_owned),
        1 => "[^*]{1,3}",
    ];
    prop::collection::vec(pieces, 1..8)
        .prop_map(move |parts| {
            let s = parts.concat();
            if query { s.replace(['&', '#'], "") } else { s }
        })
        .prop_filter("non-empty, no mask character", |s| {
            !s.is_empty() && !s.contains('*')
        })
}

fn host() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "",
        "h",
        "db.internal",
        "db.internal:5432",
        "[::1]:5432",
        "10.0.0.1",
        "hôst",
        "h:",
    ])
    .prop_map(str::to_owned)
}

fn rest() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "",
        "/",
        "/db",
        "/db?sslmode=require",
        "/db?host=/var/run/postgresql",
        "?x=1",
        "/db?user=a@b",
        "#frag",
        "/d@b",
        "/db?options=-c%20a%3Db",
    ])
    .prop_map(str::to_owned)
}

fn scheme() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["postgres", "postgresql", "mysql", "sqlite", "x+y"])
}

proptest! {
    #![proptest_config(config(2000))]

    #[test]
    fn any_string_is_handled(text in prop_oneof![
        "\\PC{0,64}",
        "[a-z:/@?#&=%*.]{0,64}",
        ("[a-z]{1,8}", "[a-z:/@?#&=%.]{0,48}").prop_map(|(s, r)| format!("{s}://{r}")),
    ]) {
        keep_if_failing("any", "url", text.as_bytes(), check_any(&text))?;
    }

    #[test]
    fn a_userinfo_password_never_survives(
        scheme in scheme(), user in "[a-z0-9._%-]{0,6}", secret in secret(false),
        host in host(), rest in rest(),
    ) {
        let url = format!("{scheme}://{user}:{secret}@{host}{rest}");
        keep_if_failing("userinfo", "url", url.as_bytes(), check_secret(&url, &secret))?;
    }

    #[test]
    fn a_query_password_never_survives(
        scheme in scheme(), auth in prop::sample::select(vec!["", "u@", "u:pw@"]), host in host(),
        before in prop::sample::select(vec!["", "sslmode=require&", "a=b&c&"]),
        key in prop::sample::select(vec!["password", "PASSWORD", "sslpassword", "SslPassword", "pass%77ord"]),
        secret in secret(true),
        // No `#fragment` after it: the value then runs to the end (masking too much), and
        // `redact_in` masks the value as written, fragment included, not the shorter
        // password a URL parser would read.
        after in prop::sample::select(vec!["", "&x=1", "&password=", "&sslmode=require"]),
    ) {
        let url = format!("{scheme}://{auth}{host}/db?{before}{key}={secret}{after}");
        keep_if_failing("query", "url", url.as_bytes(), check_secret(&url, &secret))?;
    }
}

#[test]
fn corpus_replays() {
    for (name, bytes) in corpus(TARGET, 5) {
        let text = String::from_utf8_lossy(&bytes);
        check_any(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        for secret in passwords(&text) {
            check_secret(&text, secret).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }
}

#[test]
fn the_socket_form_keeps_its_password_secret() {
    // `postgres://user:pw@/db?host=/socket` (libpq's Unix-socket form; the URL parser sqlx
    // uses rejects an empty host, and its error quotes the URL).
    for url in [
        "postgres://user:secret@/agents?host=/var/run/postgresql",
        "postgres://user:secret@",
        "postgres://user:secret@?host=/tmp",
    ] {
        assert!(
            !redact_url(url).contains("secret"),
            "{url} -> {}",
            redact_url(url)
        );
    }
}
