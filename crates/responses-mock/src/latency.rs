//! Model latency: a reply that takes time to start and to stream, as a real model's does, so
//! a bench can look like model traffic and a user can test timeouts offline.
//!
//! A reply's first output event is due `first_token_ms` after the request; each text or
//! arguments delta after it adds its tokens (4 characters a token, as the usage the
//! emulator reports) at `tokens_per_second`. Times are kept from one start, so timer
//! granularity delays an event but never accumulates. A JSON (non-streamed) reply is sent
//! when its last token would have been: when the last event of the same reply streamed is
//! due, so both count the tokens of the same deltas.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The slowest token rate a latency may have: one token per 1000 seconds. A slower one
/// (say `1e-300`) would make every reply wait longer than any client, or overflow a
/// duration; it is refused, as a rate of zero is.
pub const MIN_TOKENS_PER_SECOND: f64 = 1e-3;

/// How long a reply takes (script: `"latency"` at the top or in a rule; `mock serve
/// --first-token-ms --tokens-per-second`). The default is none at all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Latency {
    /// Milliseconds from the request to the first output event.
    #[serde(default)]
    pub first_token_ms: u64,
    /// Output tokens per second after the first (no limit when absent). Finite and at
    /// least [`MIN_TOKENS_PER_SECOND`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_second: Option<f64>,
}

impl Latency {
    /// Whether this adds no time at all.
    pub fn is_none(&self) -> bool {
        self.first_token_ms == 0 && self.tokens_per_second.is_none()
    }

    /// Why this latency cannot be used, if it cannot.
    pub fn check(&self) -> Result<(), String> {
        match self.tokens_per_second {
            Some(rate) if !(rate.is_finite() && rate > 0.0) => Err(format!(
                "latency.tokens_per_second must be a positive number, not {rate}"
            )),
            Some(rate) if rate < MIN_TOKENS_PER_SECOND => Err(format!(
                "latency.tokens_per_second must be at least {MIN_TOKENS_PER_SECOND} (one token per 1000 s), not {rate:?}"
            )),
            _ => Ok(()),
        }
    }

    /// When each of `events` (a streamed response, in order) is due, from the request.
    /// Saturates instead of overflowing (a latency that was not checked waits "forever").
    pub(crate) fn schedule(&self, events: &[Value]) -> Vec<Duration> {
        let first = Duration::from_millis(self.first_token_ms);
        let mut started = false;
        let mut tokens = 0u64;
        events
            .iter()
            .map(|event| {
                let kind = event.get("type").and_then(Value::as_str).unwrap_or("");
                if matches!(kind, "response.created" | "response.in_progress") && !started {
                    return Duration::ZERO;
                }
                started = true;
                if let Some(delta) = event.get("delta").and_then(Value::as_str) {
                    // The first delta is the first token: it comes at `first`.
                    let due = first.saturating_add(self.time_for(tokens));
                    tokens = tokens.saturating_add(crate::respond::tokens(delta));
                    return due;
                }
                first.saturating_add(self.time_for(tokens))
            })
            .collect()
    }

    /// How long a whole reply of `output_tokens` takes (a JSON reply is sent then).
    pub(crate) fn total(&self, output_tokens: u64) -> Duration {
        Duration::from_millis(self.first_token_ms).saturating_add(self.time_for(output_tokens))
    }

    fn time_for(&self, tokens: u64) -> Duration {
        match self.tokens_per_second {
            Some(rate) if rate.is_finite() && rate > 0.0 => {
                Duration::try_from_secs_f64(tokens as f64 / rate).unwrap_or(Duration::MAX)
            }
            _ => Duration::ZERO,
        }
    }
}

/// `started + after`, or a time decades away when that cannot be represented: what
/// tokio's `sleep` does with a duration too long for an `Instant`. Never panics.
pub(crate) fn deadline(started: tokio::time::Instant, after: Duration) -> tokio::time::Instant {
    const FAR: Duration = Duration::from_secs(86_400 * 365 * 30);
    started
        .checked_add(after)
        .or_else(|| started.checked_add(FAR))
        .unwrap_or(started)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ms(d: Duration) -> u128 {
        d.as_millis()
    }

    #[test]
    fn the_first_output_event_waits_for_the_first_token_and_deltas_for_their_tokens() {
        let latency = Latency {
            first_token_ms: 100,
            tokens_per_second: Some(10.0),
        };
        let events = [
            json!({"type": "response.created"}),
            json!({"type": "response.in_progress"}),
            json!({"type": "response.output_item.added"}),
            json!({"type": "response.output_text.delta", "delta": "abcdefgh"}), // 2 tokens
            json!({"type": "response.output_text.delta", "delta": "abcd"}),     // 1 token
            json!({"type": "response.output_text.done"}),
            json!({"type": "response.completed"}),
        ];
        let due: Vec<u128> = latency.schedule(&events).into_iter().map(ms).collect();
        assert_eq!(due, vec![0, 0, 100, 100, 300, 400, 400]);
        assert_eq!(ms(latency.total(3)), 400);
    }

    #[test]
    fn no_latency_is_no_time_and_a_bad_rate_is_refused() {
        let none = Latency::default();
        assert!(none.is_none());
        let events = [json!({"type": "response.output_text.delta", "delta": "x".repeat(400)})];
        assert_eq!(none.schedule(&events), vec![Duration::ZERO]);
        for rate in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e-300, 9e-4] {
            let bad = Latency {
                first_token_ms: 0,
                tokens_per_second: Some(rate),
            };
            assert!(bad.check().is_err(), "{rate}");
        }
        let parsed: Latency = serde_json::from_value(json!({"first_token_ms": 5})).unwrap();
        assert_eq!(parsed.first_token_ms, 5);
        assert!(serde_json::from_value::<Latency>(json!({"ttft": 5})).is_err());
        let slowest = Latency {
            first_token_ms: 0,
            tokens_per_second: Some(MIN_TOKENS_PER_SECOND),
        };
        assert_eq!(slowest.check(), Ok(()));
    }

    #[test]
    fn durations_saturate_instead_of_overflowing() {
        // Not checked (as a library user may build it): no panic, just "a very long time".
        let tiny = Latency {
            first_token_ms: u64::MAX,
            tokens_per_second: Some(1e-300),
        };
        assert_eq!(tiny.total(1), Duration::MAX);
        let events = [
            json!({"type": "response.output_text.delta", "delta": "abcd"}),
            json!({"type": "response.output_text.delta", "delta": "abcd"}),
        ];
        // The first token is due at `first_token_ms`; the next would be past any duration.
        assert_eq!(
            tiny.schedule(&events),
            vec![Duration::from_millis(u64::MAX), Duration::MAX]
        );
        let now = tokio::time::Instant::now();
        assert!(deadline(now, Duration::MAX) > now);
        assert_eq!(
            deadline(now, Duration::from_secs(1)),
            now + Duration::from_secs(1)
        );
    }
}
