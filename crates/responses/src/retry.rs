//! The official SDK's retry policy, as pure functions (the Python SDK's `_should_retry` and
//! `_calculate_retry_timeout` in
//! <https://github.com/openai/openai-python/blob/main/src/openai/_base_client.py>).
//!
//! Decision order: a `retry-after(-ms)` above [`MAX_RETRY_AFTER`] forbids retrying; then
//! `x-should-retry: true|false` decides; then statuses 408, 409, 429 and >= 500 retry.
//! Delay: a server-given `0 < d <= 120 s` is used exactly (no jitter); otherwise
//! `min(initial * 2^retries_taken, 8 s) * (1 - 0.25 * random)`. The headers are the
//! server's: one that does not parse, or an HTTP date with a field out of range (a day 0,
//! an hour of 3000000000000000), gives no delay (the backoff is used), never an overflow.
//!
//! The same rules hold for a caller that retries a whole call after the client gave up
//! ([`RetryPolicy::backoff`]): the error keeps the server's delay
//! ([`ClientError::retry_after`]), which is waited for again, and one above the cap makes
//! the error [`Retry::Never`].

use std::time::{Duration, SystemTime};

use reqwest::header::HeaderMap;

use crate::error::ClientError;

/// Whether a failed request may succeed if it is sent again ([`ClientError::retry`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// No: the API refused the request itself (400, 401, 403, 404, 422, ...: its message
    /// says why), or this client cannot make it (no key, a bad base URL, an answer that
    /// does not decode, a 2xx that is not an event stream), or the server asked for a wait
    /// above [`MAX_RETRY_AFTER`]. The same request gets the same answer; something must
    /// change first.
    Never,
    /// Yes, after a wait ([`RetryPolicy::delay`]): the API was busy or failed (408, 409,
    /// 429, 5xx), the connection failed or timed out, or the stream was cut before its end.
    Backoff,
}

/// The SDK's default: 2 retries, 3 attempts in all.
pub const DEFAULT_MAX_RETRIES: u32 = 2;
/// `MAX_RETRY_AFTER_DELAY`: server delays above this are not waited for.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(120);
/// `INITIAL_RETRY_DELAY`.
pub const INITIAL_RETRY_DELAY: Duration = Duration::from_millis(500);
/// `MAX_RETRY_DELAY`.
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(8);

/// Backoff settings (the defaults are the SDK's; tests may shrink `initial`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (so `max_retries + 1` attempts).
    pub max_retries: u32,
    /// Base delay of the first retry; doubles per retry, with up to 25% jitter.
    pub initial_delay: Duration,
    /// Longest delay between retries.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: DEFAULT_MAX_RETRIES,
            initial_delay: INITIAL_RETRY_DELAY,
            max_delay: MAX_RETRY_DELAY,
        }
    }
}

impl RetryPolicy {
    /// How long to wait before retry number `retries_taken + 1` (`retries_taken` counts the
    /// retries already made, so 0 before the first), whatever failed: a status, a broken
    /// connection or a cut stream all wait the same. `retry_after` is the delay the API asked
    /// for (`retry-after-ms` / `retry-after`, see [`server_delay`]): used exactly when
    /// `0 < d <= 120 s`. Otherwise `min(initial * 2^retries_taken, max)` less up to 25%
    /// jitter: with the defaults 0.375-0.5 s, then 0.75-1 s, ..., at most 6-8 s.
    pub fn delay(&self, retries_taken: u32, retry_after: Option<Duration>) -> Duration {
        delay_from(self, retries_taken, retry_after, jitter_unit())
    }

    /// The wait before retrying after `err` when `retries_taken` retries were made already:
    /// the server's delay when the error carries one ([`ClientError::retry_after`]), else
    /// the backoff; `None` when `err` is not worth retrying ([`Retry::Never`], which
    /// includes a server delay above [`MAX_RETRY_AFTER`]) or the policy's `max_retries` are
    /// used up. `retries_taken` counts the caller's own retries; the client's are in
    /// [`ClientError::retries_taken`]. The one call a retry loop needs:
    ///
    /// ```
    /// # use agent_responses::{ClientError, retry::RetryPolicy};
    /// let policy = RetryPolicy::default();
    /// let cut = ClientError::StreamEndedEarly;
    /// assert!(policy.backoff(&cut, 0).is_some_and(|d| d.as_millis() >= 375));
    /// assert_eq!(policy.backoff(&cut, policy.max_retries), None);
    /// assert_eq!(policy.backoff(&ClientError::MissingApiKey, 0), None);
    /// ```
    pub fn backoff(&self, err: &ClientError, retries_taken: u32) -> Option<Duration> {
        match err.retry() {
            Retry::Never => None,
            Retry::Backoff if retries_taken >= self.max_retries => None,
            Retry::Backoff => Some(self.delay(retries_taken, err.retry_after())),
        }
    }
}

/// The server-requested delay from `retry-after-ms`, else `retry-after` (seconds or HTTP date).
pub fn server_delay(headers: &HeaderMap) -> Option<Duration> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        return duration_from_secs(ms / 1000.0);
    }
    let value = header("retry-after")?;
    if let Ok(secs) = value.parse::<f64>() {
        return duration_from_secs(secs);
    }
    let when = parse_http_date(value)?;
    Some(
        when.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// `secs` as a delay; one past what a `Duration` holds is the longest (a server that asks
/// for ~2e19 s asks not to be retried, as one asking for 1e19 s does). `None` for a
/// negative or NaN value, as for any other header that is not a delay.
fn duration_from_secs(secs: f64) -> Option<Duration> {
    if secs >= 0.0 {
        Some(Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX))
    } else {
        None
    }
}

/// Whether a response with `status` and `headers` should be retried (ignoring attempt counts).
pub fn should_retry(status: u16, headers: &HeaderMap) -> bool {
    if server_delay(headers).is_some_and(|d| d > MAX_RETRY_AFTER) {
        return false;
    }
    if let Some(should) = should_retry_header(headers) {
        return should;
    }
    matches!(status, 408 | 409 | 429) || status >= 500
}

/// The server's `x-should-retry` header: `Some(true)` for `true`, `Some(false)` for
/// `false`, `None` when it is absent or says anything else.
pub fn should_retry_header(headers: &HeaderMap) -> Option<bool> {
    match headers.get("x-should-retry").and_then(|v| v.to_str().ok()) {
        Some("true") => Some(true),
        Some("false") => Some(false),
        _ => None,
    }
}

/// How long to wait before retry number `retries_taken + 1`; `unit` in [0, 1) is the jitter draw.
pub fn retry_delay(
    policy: &RetryPolicy,
    retries_taken: u32,
    headers: Option<&HeaderMap>,
    unit: f64,
) -> Duration {
    delay_from(policy, retries_taken, headers.and_then(server_delay), unit)
}

/// [`RetryPolicy::delay`] with the jitter draw `unit` in [0, 1) given.
pub fn delay_from(
    policy: &RetryPolicy,
    retries_taken: u32,
    retry_after: Option<Duration>,
    unit: f64,
) -> Duration {
    if let Some(d) = retry_after
        && d > Duration::ZERO
        && d <= MAX_RETRY_AFTER
    {
        return d;
    }
    let factor = 2f64.powi(i32::try_from(retries_taken.min(30)).unwrap_or(30));
    let base = (policy.initial_delay.as_secs_f64() * factor).min(policy.max_delay.as_secs_f64());
    let jitter = 1.0 - 0.25 * unit.clamp(0.0, 1.0);
    Duration::from_secs_f64(base * jitter)
}

/// A jitter draw in [0, 1).
pub fn jitter_unit() -> f64 {
    rand::random::<f64>()
}

/// Parses an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), the only form servers must send.
/// The header is the server's: every field is range-checked (a day that exists in its
/// month, a four-digit year from 1970, `HH:MM:SS` with a leap second allowed) and the
/// arithmetic is checked, so a malformed or absurd date is `None` (ignored for timing)
/// instead of an overflow.
fn parse_http_date(value: &str) -> Option<SystemTime> {
    let parts: Vec<&str> = value.split_whitespace().collect();
    let [_, day, month, year, time, "GMT"] = parts.as_slice() else {
        return None;
    };
    let day = digits(day, 1..=2)?;
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ]
    .iter()
    .position(|m| m == month)
    .and_then(|i| u64::try_from(i).ok())?
        + 1;
    let year = digits(year, 4..=4)?;
    let hms: Vec<u64> = time
        .split(':')
        .map(|p| digits(p, 2..=2))
        .collect::<Option<_>>()?;
    let [h, m, s] = hms.as_slice() else {
        return None;
    };
    if year < 1970 || day == 0 || day > days_in_month(year, month) || *h > 23 || *m > 59 || *s > 60
    {
        return None;
    }
    // Days from civil (Howard Hinnant); the ranges above keep every step far from overflow,
    // and it is checked all the same.
    let (y, mo) = if month <= 2 {
        (year.checked_sub(1)?, month + 9)
    } else {
        (year, month - 3)
    };
    let era = y / 400;
    let yoe = y - era * 400;
    let doy = (153 * mo + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era
        .checked_mul(146_097)?
        .checked_add(doe)?
        .checked_sub(719_468)?;
    let secs = days
        .checked_mul(86_400)?
        .checked_add(h * 3600 + m * 60 + s)?;
    SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(secs))
}

/// `text` as a number when it is `len` ASCII digits (no sign, no space).
fn digits(text: &str, len: std::ops::RangeInclusive<usize>) -> Option<u64> {
    if !len.contains(&text.len()) || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Days in `month` (1-12) of `year` (Gregorian).
fn days_in_month(year: u64, month: u64) -> u64 {
    match month {
        4 | 6 | 9 | 11 => 30,
        2 if year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400)) => {
            29
        }
        2 => 28,
        _ => 31,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn statuses_and_override_headers() {
        let none = HeaderMap::new();
        for s in [408, 409, 429, 500, 502, 503] {
            assert!(should_retry(s, &none), "{s}");
        }
        for s in [400, 401, 403, 404, 422] {
            assert!(!should_retry(s, &none), "{s}");
        }
        assert!(!should_retry(500, &headers(&[("x-should-retry", "false")])));
        assert!(should_retry(400, &headers(&[("x-should-retry", "true")])));
        assert!(!should_retry(429, &headers(&[("retry-after", "121")])));
        assert!(!should_retry(
            429,
            &headers(&[("retry-after-ms", "120001"), ("x-should-retry", "true")])
        ));
        assert!(should_retry(429, &headers(&[("retry-after", "120")])));
        // Past what a Duration holds, a delay is still too long (it read as no header).
        for huge in ["2e19", "99999999999999999999999", "1e400"] {
            assert!(
                !should_retry(429, &headers(&[("retry-after", huge)])),
                "{huge}"
            );
        }
        assert!(should_retry(429, &headers(&[("retry-after", "-1")])));
    }

    #[test]
    fn delays_follow_the_sdk() {
        let p = RetryPolicy::default();
        assert_eq!(
            retry_delay(&p, 0, Some(&headers(&[("retry-after", "3")])), 0.9),
            Duration::from_secs(3)
        );
        assert_eq!(
            retry_delay(
                &p,
                0,
                Some(&headers(&[("retry-after-ms", "250"), ("retry-after", "9")])),
                0.9
            ),
            Duration::from_millis(250)
        );
        assert_eq!(retry_delay(&p, 0, None, 0.0), Duration::from_millis(500));
        assert_eq!(retry_delay(&p, 0, None, 1.0), Duration::from_millis(375));
        assert_eq!(retry_delay(&p, 1, None, 0.0), Duration::from_secs(1));
        assert_eq!(retry_delay(&p, 10, None, 0.0), Duration::from_secs(8));
        assert_eq!(retry_delay(&p, 10, None, 1.0), Duration::from_secs(6));
        // retry-after 0 or above the cap falls back to backoff.
        assert_eq!(
            retry_delay(&p, 0, Some(&headers(&[("retry-after", "0")])), 0.0),
            Duration::from_millis(500)
        );
        // The same policy through `RetryPolicy::delay`, for any retryable failure.
        let ask = |after| delay_from(&p, 0, Some(Duration::from_millis(after)), 0.0);
        assert_eq!(ask(250), Duration::from_millis(250));
        assert_eq!(ask(0), Duration::from_millis(500));
        assert_eq!(ask(120_001), Duration::from_millis(500));
        for retries in 0..6 {
            let d = p.delay(retries, None);
            let base = (0.5 * 2f64.powi(retries as i32)).min(8.0);
            assert!(
                d.as_secs_f64() >= base * 0.75 && d.as_secs_f64() <= base,
                "{retries}: {d:?}"
            );
        }
        let date = parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        assert_eq!(
            date.duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .as_secs(),
            784_111_777
        );
    }
}
