//! `agent-redact`: masks the passwords of a database URL, in the URL itself and in any text
//! that quotes it (a driver's error message, a log line).
//!
//! A password is the userinfo password (`scheme://user:PASSWORD@host/...`) and the value of
//! a `password=` or `sslpassword=` query parameter (any case). Each becomes `***`; the rest
//! of the URL (scheme, user, host, port, database, other parameters) stays readable, since
//! that is what a user needs to see to fix a wrong URL.
//!
//! Invariants: [`redact_url`]'s output never contains a password of the input; [`redact_in`]
//! leaves none standing as a whole token (not inside a longer word), and no quotation of
//! the URL unredacted. Users type passwords unencoded, so a password may hold `/`, `?`, `#`
//! or `@`; when the URL is ambiguous this masks too much, never too little.
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
//! assert_eq!(
//!     redact_in(&message, url),
//!     "cannot open postgres://app:***@db.internal:5432/agents?sslpassword=***: password *** refused"
//! );
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

/// `text` with every quotation of `url` (as given, or already redacted) replaced by its
/// redacted form ([`redact_url`]), and
/// every password of `url` (as written, and percent-decoded) replaced by [`MASK`] wherever
/// else it stands as a whole token.
///
/// For messages built by code that does not know the URL is secret, such as a driver's
/// error that quotes the URL or a part of it.
///
/// A whole token: the characters on both sides of the occurrence (in `text`) are not
/// alphanumeric, `_` or `-`, or there are none. A password inside a longer word is left
/// alone, so a password such as `postgres` or `data` does not garble the scheme, the user
/// or the words of a message (`database "x" does not exist`) and so give itself away by
/// what it garbled. Quotations of `url` are redacted structurally (password and
/// `password=`/`sslpassword=` values only), so their scheme, user, host and database stay
/// readable whatever the password is.
///
/// Not masked apart from quotations of `url`: a password that equals another part of
/// the URL (the user name, say) is masked there too wherever the message names that part
/// on its own, as a server message naming the user does; that is the price of masking
/// the password wherever it stands alone.
pub fn redact_in(text: &str, url: &str) -> String {
    let mut forms: Vec<String> = passwords(url)
        .into_iter()
        .flat_map(|secret| [secret.to_owned(), percent_decode(secret)])
        .filter(|form| !form.is_empty())
        .collect();
    if url.is_empty() {
        return text.to_owned();
    }
    // Longest first: at one position, a longer password wins over its prefix.
    forms.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    forms.dedup();
    let shown_url = redact_url(url);
    // Quotations of the URL, as given or already redacted (an error that names the URL as
    // its caller showed it), in order and not overlapping.
    let mut quoted: Vec<Range<usize>> = [url, shown_url.as_str()]
        .iter()
        .flat_map(|quote| {
            text.match_indices(*quote)
                .map(|(start, _)| start..start + quote.len())
        })
        .collect();
    quoted.sort_by_key(|r| (r.start, std::cmp::Reverse(r.end)));
    let mut last_end = 0;
    quoted.retain(|r| {
        let keep = r.start >= last_end;
        if keep {
            last_end = r.end;
        }
        keep
    });
    let mut shown = String::with_capacity(text.len());
    let mut from = 0;
    for range in quoted {
        mask_tokens(text, from..range.start, &forms, &mut shown);
        shown.push_str(&shown_url);
        from = range.end;
    }
    mask_tokens(text, from..text.len(), &forms, &mut shown);
    shown
}

/// Whether `c` continues a word: a password next to one is part of a longer token.
fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '-'
}

/// Appends `text[part]` to `out` with every whole-token occurrence (judged on the
/// characters of `text` around it) of one of `forms` (longest first) replaced by [`MASK`].
fn mask_tokens(text: &str, part: Range<usize>, forms: &[String], out: &mut String) {
    let Some(segment) = text.get(part.clone()) else {
        return;
    };
    let before = |at: usize| text.get(..at).and_then(|s| s.chars().next_back());
    let after = |at: usize| text.get(at..).and_then(|s| s.chars().next());
    let mut i = 0;
    while let Some(rest) = segment.get(i..) {
        let Some(c) = rest.chars().next() else { break };
        let at = part.start + i;
        let starts_token = !before(at).is_some_and(is_word_char);
        let found = starts_token
            .then(|| {
                forms.iter().find(|form| {
                    rest.starts_with(form.as_str())
                        && !after(at + form.len()).is_some_and(is_word_char)
                })
            })
            .flatten();
        match found {
            Some(form) => {
                out.push_str(MASK);
                i += form.len();
            }
            None => {
                out.push(c);
                i += c.len_utf8();
            }
        }
    }
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
    fn redact_in_keeps_the_url_readable_when_the_password_is_a_word_of_it() {
        let url = "postgres://postgres:postgres@127.0.0.1:55432/x";
        assert_eq!(
            redact_in(&format!("cannot open journal at `{url}`"), url),
            "cannot open journal at `postgres://postgres:***@127.0.0.1:55432/x`"
        );
        // Already redacted by whoever quoted it: left as it is.
        let shown = "postgres://postgres:***@127.0.0.1:55432/x";
        assert_eq!(
            redact_in(&format!("cannot open journal at `{shown}`: refused"), url),
            format!("cannot open journal at `{shown}`: refused")
        );
        // A bare mention elsewhere is still masked; the scheme of another quotation is a
        // token too (the documented cost of a password equal to a word of the URL).
        assert_eq!(
            redact_in("password postgres refused for user \"postgres\"", url),
            "password *** refused for user \"***\""
        );
    }

    #[test]
    fn redact_in_masks_whole_tokens_only() {
        let url = "postgres://u:data@h/db";
        assert_eq!(
            redact_in(
                "error returned from database: database \"nonexistent_db\" does not exist",
                url
            ),
            "error returned from database: database \"nonexistent_db\" does not exist"
        );
        for (text, shown) in [
            ("data", "***"),
            ("(data)", "(***)"),
            ("`data`: no", "`***`: no"),
            ("pw=data;", "pw=***;"),
            ("data.", "***."),
            (
                "metadata data_x x-data data1 DATA",
                "metadata data_x x-data data1 DATA",
            ),
            ("ä data ü", "ä *** ü"),
            ("ädata", "ädata"),
        ] {
            assert_eq!(redact_in(text, url), shown, "{text}");
        }
        // A quotation of the URL next to a word: its own boundaries, no bare masking of it.
        assert_eq!(
            redact_in(&format!("x{url}data"), url),
            "xpostgres://u:***@h/dbdata"
        );
    }

    #[test]
    fn redact_in_prefers_the_longest_password_at_one_place() {
        let url = "postgres://u:ab@h/db?password=ab%20cd";
        assert_eq!(redact_in("got ab cd and ab", url), "got *** and ***");
        assert_eq!(redact_in("got ab%20cd", url), "got ***");
        assert_eq!(redact_in("no password here", ""), "no password here");
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
