//! The official SDK's WebSocket reconnect policy (`types/websocket_reconnection.py`).
//!
//! Invariants: only the close codes in [`RECOVERABLE_CLOSE_CODES`] are retried; at most
//! `max_retries` attempts in a row; the delay doubles from `initial_delay` up to `max_delay`
//! with the SDK's jitter; requests that were in flight are never replayed (the session
//! reports them as outcome-unknown instead).

use std::time::Duration;

/// Close codes after which the SDK reconnects: going away, no status, abnormal closure,
/// internal error, service restart, try again later, TLS handshake failure.
pub const RECOVERABLE_CLOSE_CODES: [u16; 7] = [1001, 1005, 1006, 1011, 1012, 1013, 1015];

/// Whether a connection closed with `code` may be reopened.
pub fn is_recoverable(code: u16) -> bool {
    RECOVERABLE_CLOSE_CODES.contains(&code)
}

/// Reconnect settings; `enabled: false` (the default, as in the SDK without
/// `on_reconnecting`) means a closed connection stays closed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReconnectPolicy {
    /// Whether a dropped connection is reopened at all.
    pub enabled: bool,
    /// Reopen attempts per drop before giving up.
    pub max_retries: u32,
    /// Wait before the first attempt; doubles per attempt.
    pub initial_delay: Duration,
    /// Longest wait between attempts.
    pub max_delay: Duration,
}

impl Default for ReconnectPolicy {
    fn default() -> Self {
        Self {
            enabled: false,
            max_retries: 5,
            initial_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(8),
        }
    }
}

impl ReconnectPolicy {
    /// The SDK's settings, switched on.
    pub fn sdk() -> Self {
        Self {
            enabled: true,
            ..Self::default()
        }
    }

    /// Delay before attempt `attempt` (1-based); `unit` in [0, 1) is the jitter draw.
    pub fn delay(&self, attempt: u32, unit: f64) -> Duration {
        let exponent = i32::try_from(attempt.saturating_sub(1).min(30)).unwrap_or(30);
        let base = (self.initial_delay.as_secs_f64() * 2f64.powi(exponent))
            .min(self.max_delay.as_secs_f64());
        Duration::from_secs_f64(base * (1.0 - 0.25 * unit.clamp(0.0, 1.0)))
    }

    /// Whether a close with `code` after `attempts_made` failed reconnects may be retried.
    pub fn should_reconnect(&self, code: u16, attempts_made: u32) -> bool {
        self.enabled && is_recoverable(code) && attempts_made < self.max_retries
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_limits() {
        let p = ReconnectPolicy::sdk();
        for code in RECOVERABLE_CLOSE_CODES {
            assert!(p.should_reconnect(code, 0), "{code}");
        }
        for code in [1000, 1002, 1003, 1007, 1008, 1009, 1010, 4000] {
            assert!(!p.should_reconnect(code, 0), "{code}");
        }
        assert!(p.should_reconnect(1006, 4));
        assert!(!p.should_reconnect(1006, 5));
        assert!(!ReconnectPolicy::default().should_reconnect(1006, 0));
    }

    #[test]
    fn delays_double_to_the_cap() {
        let p = ReconnectPolicy::sdk();
        assert_eq!(p.delay(1, 0.0), Duration::from_millis(500));
        assert_eq!(p.delay(2, 0.0), Duration::from_secs(1));
        assert_eq!(p.delay(3, 0.0), Duration::from_secs(2));
        assert_eq!(p.delay(5, 0.0), Duration::from_secs(8));
        assert_eq!(p.delay(9, 0.0), Duration::from_secs(8));
        assert_eq!(p.delay(1, 1.0), Duration::from_millis(375));
    }
}
