//! `agent-redact`: masks the passwords of a database URL, in the URL itself and in any text
//! that quotes it (a driver's error message, a log line).
//!
//! A password is the userinfo password (`scheme://user:PASSWORD@host/...`) and the value of
//! a `password=` or `sslpassword=` query parameter (any case). Each becomes `***`; the rest
//! of the URL (scheme, user, host, port, database, other parameters) stays readable, since
//! that is what a user needs to see to fix a wrong URL.
//!
//! Invariant: the output never contains a password of the input. Users type passwords
//! unencoded, so a password may hold `/`, `?`, `#` or `@`; when the URL is ambiguous this
//! masks too much, never too little.
//!
//! ```
//! use agent_redact::{redact_in, redact_url};
//!
//! let url = "postgres://app:s3cret@db.internal:5432/agents?sslpassword=k3y";
//! assert_eq!(
//!     redact_url(url),
//!     "postgres://app:***@db.internal:5432/agents?sslpassword=***"
//! );
//! let message = format!("cannot open {url}: password s3cret refused");
//! assert!(!redact_in(&message, url).contains("s3cret"));
//! ```
//!
//! No dependencies and no sibling crates: the journal, the context store and the CLI can
//! all use it without knowing each other.

#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]

use std::ops::Range;

/// What a password is replaced with.
pub const MASK: &str = "***";

/// `url` with every password replaced by [`MASK`]; a URL without one is returned unchanged.
pub fn redact_url(url: &str) -> String {
    let mut shown = url.to_owned();
    // Back to front, so earlier ranges stay valid.
    for range in secret_ranges(url)
        .into_iter()
        .rev()
        .filter(|r| !r.is_empty())
    {
        shown.replace_range(range, MASK);
    }
    shown
}

/// `text` with every quotation of `url` replaced by its redacted form and every password of
/// `url` (as written, and percent-decoded) replaced by [`MASK`] wherever else it appears.
///
/// For messages built by code that does not know the URL is secret, such as a driver's
/// error that quotes the URL or a part of it.
pub fn redact_in(text: &str, url: &str) -> String {
    let mut shown = text.replace(url, &redact_url(url));
    for secret in passwords(url) {
        for form in [secret.to_owned(), percent_decode(secret)] {
            if !form.is_empty() {
                shown = shown.replace(&form, MASK);
            }
        }
    }
    shown
}

/// The passwords in `url`, as written (not decoded).
pub fn passwords(url: &str) -> Vec<&str> {
    secret_ranges(url)
        .into_iter()
        .filter_map(|range| url.get(range))
        .filter(|secret| !secret.is_empty())
        .collect()
}

/// Byte ranges of the passwords in `url`, in order, not overlapping.
fn secret_ranges(url: &str) -> Vec<Range<usize>> {
    let mut ranges = Vec::new();
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        // `sqlite:PATH`, `memory:`, a bare path: no authority, but maybe a query.
        ranges.extend(query_secrets(url, 0));
        return ranges;
    };
    if let Some((password, at)) = userinfo_password(url, scheme_end) {
        ranges.push(password);
        ranges.extend(query_secrets(url, at));
    }
    // Also the query as it reads when the userinfo ends earlier than guessed: in
    // `u:pw@/db?password=@h` the `@h` may be a host or the end of a query password. Both
    // readings are masked; overlapping ranges are merged.
    ranges.extend(query_secrets(url, scheme_end));
    merge(ranges)
}

/// `ranges` sorted and with overlapping ones joined, so they can be replaced back to front.
fn merge(mut ranges: Vec<Range<usize>>) -> Vec<Range<usize>> {
    ranges.sort_by_key(|r| (r.start, r.end));
    let mut merged: Vec<Range<usize>> = Vec::with_capacity(ranges.len());
    for range in ranges {
        match merged.last_mut() {
            Some(last) if range.start < last.end => last.end = last.end.max(range.end),
            _ => merged.push(range),
        }
    }
    merged
}

/// The password's range and the position of the `@` ending the userinfo, when the
/// authority starting at `start` has a `user:password@`.
///
/// The userinfo ends at the last `@` followed by something that looks like a host (or by
/// no host: `@/db`, `@?host=`, `@` at the end), not at
/// the first `/`, `?` or `#` as in a well-formed URL: a password typed unencoded may hold
/// any of those (base64 passwords hold `/`). The cost is masking too much in the odd URL
/// with a port and an `@` in its query (`postgres://h:5432/db?user=a@b`).
fn userinfo_password(url: &str, start: usize) -> Option<(Range<usize>, usize)> {
    let rest = url.get(start..)?;
    let colon = rest.find(':')?;
    let user = rest.get(..colon)?;
    if user.contains(['/', '?', '#', '@']) {
        return None;
    }
    let at = rest
        .rmatch_indices('@')
        .map(|(i, _)| i)
        .find(|&i| i > colon && ends_userinfo(rest.get(i + 1..).unwrap_or("")))?;
    Some((start + colon + 1..start + at, start + at))
}

/// True when `after_at` starts with a host (and port) that is not a query value, or with
/// no host at all (`user:pw@/db?host=/socket`, libpq's Unix-socket form, or a URL cut
/// after the `@`): an `@` there can only end the userinfo.
fn ends_userinfo(after_at: &str) -> bool {
    let host = after_at.split(['/', '?', '#']).next().unwrap_or_default();
    !host.contains(['=', '&', '@'])
}

/// Ranges of the values of `password=` and `sslpassword=` in the query after `from`.
fn query_secrets(url: &str, from: usize) -> Vec<Range<usize>> {
    let Some(query_start) = url
        .get(from..)
        .and_then(|s| s.find('?'))
        .map(|i| from + i + 1)
    else {
        return Vec::new();
    };
    let mut ranges = Vec::new();
    let mut pair_start = query_start;
    for pair in url.get(query_start..).unwrap_or("").split('&') {
        if let Some((key, value)) = pair.split_once('=') {
            let key = percent_decode(key);
            if key.eq_ignore_ascii_case("password") || key.eq_ignore_ascii_case("sslpassword") {
                let value_start = pair_start + pair.len() - value.len();
                ranges.push(value_start..pair_start + pair.len());
            }
        }
        pair_start += pair.len() + 1;
    }
    ranges
}

/// `%XX` escapes decoded (invalid escapes and non-UTF-8 results kept as they are).
fn percent_decode(text: &str) -> String {
    percent_decoded(text).unwrap_or_else(|| text.to_owned())
}

/// `text` with its `%XX` escapes decoded (an invalid escape stays as written); `None` when
/// the result is not UTF-8.
pub fn percent_decoded(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let escaped = (b == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(value) => {
                out.push(value);
                i += 3;
            }
            None => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_the_userinfo_password_only() {
        for (url, shown) in [
            (
                "postgres://u:secret@h:5432/db?x=1",
                "postgres://u:***@h:5432/db?x=1",
            ),
            ("mysql://u:SECRETPW@h/x", "mysql://u:***@h/x"),
            ("postgres://u:p?w@h/db", "postgres://u:***@h/db"),
            ("postgres://u:p@ss@h/db", "postgres://u:***@h/db"),
            ("postgres://u:pa/ss@h/db", "postgres://u:***@h/db"),
            (
                "postgres://u:ab/c+d==@h:1/db?sslmode=require",
                "postgres://u:***@h:1/db?sslmode=require",
            ),
            ("postgres://u:p#w@h", "postgres://u:***@h"),
            ("postgres://u:@h/db", "postgres://u:@h/db"),
            (
                "postgres://u:secret@/db?host=/var/run/postgresql",
                "postgres://u:***@/db?host=/var/run/postgresql",
            ),
            ("postgres://u:secret@", "postgres://u:***@"),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
        }
    }

    #[test]
    fn leaves_urls_without_a_password_alone() {
        for url in [
            "postgres://u@h/db",
            "postgres://h:5432/db",
            "postgres://h/db?user=a@b&sslmode=require",
            "sqlite:///tmp/a.db",
            "sqlite://a:b.db",
            "sqlite::memory:",
            "memory:",
            "/tmp/plain.db",
            "",
        ] {
            assert_eq!(redact_url(url), url);
            assert!(passwords(url).is_empty(), "{url}");
        }
    }

    #[test]
    fn masks_password_parameters_in_any_case() {
        assert_eq!(
            redact_url("postgres://h/db?user=u&password=s3cret&sslmode=require"),
            "postgres://h/db?user=u&password=***&sslmode=require"
        );
        assert_eq!(
            redact_url("postgres://u:pw@h/db?SSLPassword=k&password"),
            "postgres://u:***@h/db?SSLPassword=***&password"
        );
        assert_eq!(
            redact_url("sqlite://x.db?pass%77ord=k"),
            "sqlite://x.db?pass%77ord=***"
        );
        assert_eq!(
            redact_url("sqlite:x.db?password=k"),
            "sqlite:x.db?password=***"
        );
        assert_eq!(
            passwords("postgres://u:a@h/db?password=b&sslpassword=c"),
            ["a", "b", "c"]
        );
    }

    #[test]
    fn redact_in_masks_quotations_and_bare_passwords() {
        let url = "postgres://u:s%40cret@h/db";
        let message = format!("bad url {url}: password `s@cret` or s%40cret refused");
        let shown = redact_in(&message, url);
        assert_eq!(
            shown,
            "bad url postgres://u:***@h/db: password `***` or *** refused"
        );
    }

    #[test]
    fn never_returns_a_password_of_the_input() {
        // Every split of a password into awkward characters, in both places.
        let pieces = ["/", "?", "#", "@", "=", "&", ":", "%", "x"];
        for a in pieces {
            for b in pieces {
                let secret = format!("S{a}E{b}C");
                let parts = ["S", "E", "C"];
                for url in [
                    format!("postgres://u:{secret}@h:5/db?sslmode=x"),
                    format!("postgres://u:{secret}@h"),
                ] {
                    let shown = redact_url(&url);
                    let leaked = parts.iter().any(|p| shown.contains(p));
                    assert!(!leaked, "{url} -> {shown}");
                }
            }
        }
    }
}
