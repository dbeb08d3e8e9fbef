//! Client configuration. The key comes from `OPENAI_API_KEY` only and is never printed.

use std::time::Duration;

use crate::error::ClientError;
use crate::retry::RetryPolicy;

/// The public API base.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// An API key. `Debug` and `Display` never show it.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wraps a key; empty keys are refused.
    pub fn new(key: impl Into<String>) -> Option<Self> {
        let key = key.into();
        let trimmed = key.trim();
        if trimmed.is_empty() {
            None
        } else {
            Some(Self(trimmed.to_owned()))
        }
    }
    /// `OPENAI_API_KEY`, when set and non-empty.
    pub fn from_env() -> Option<Self> {
        std::env::var("OPENAI_API_KEY").ok().and_then(Self::new)
    }
    pub(crate) fn bearer(&self) -> String {
        format!("Bearer {}", self.0)
    }

    /// `text` with the key replaced by `***` (as the host masks it in journals and output)
    /// wherever it stands, and at the end of `text` when `text` was cut inside it (a
    /// trailing start of the key, 4 characters or more): for text that comes from elsewhere
    /// (a server's answer, an error) before it reaches a log line or an error message.
    pub(crate) fn mask(&self, text: &str) -> String {
        const MASK: &str = "***";
        let mut masked = text.replace(&self.0, MASK);
        let cut = (4..self.0.len())
            .rev()
            .filter(|n| self.0.is_char_boundary(*n))
            .find(|n| masked.ends_with(&self.0[..*n]));
        if let Some(n) = cut {
            masked.truncate(masked.len() - n);
            masked.push_str(MASK);
        }
        masked
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

impl std::fmt::Display for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// How the client connects and retries. Defaults are the official SDK's.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// e.g. `https://api.openai.com/v1` (no trailing slash needed).
    pub base_url: String,
    /// The bearer key; shown nowhere.
    pub api_key: ApiKey,
    /// When and how long to wait before retrying.
    pub retry: RetryPolicy,
    /// TCP connect timeout (SDK: 5 s).
    pub connect_timeout: Duration,
    /// Per-read timeout of a JSON response (SDK: 600 s).
    pub read_timeout: Duration,
    /// Longest wait for the next event of a stream, from its headers and then between two
    /// events; SSE comments (keep-alives) do not count as events (SDK: 600 s, its read
    /// timeout). [`WsConfig::from_client_config`](crate::ws::WsConfig::from_client_config)
    /// takes it as the WebSocket's `request_timeout`.
    pub stream_idle_timeout: Duration,
    /// Sent as `User-Agent`.
    pub user_agent: String,
    /// Speak HTTP/2 from the first byte on a plain `http://` base URL (h2c), for a server
    /// known to accept it (`agentctl mock serve` does). Off by default: over `https://`,
    /// HTTP/2 is negotiated anyway (TLS ALPN, as with the public API), and a plain HTTP
    /// server may speak only HTTP/1.1. With HTTP/2, concurrent requests share one
    /// connection instead of holding one each.
    pub http2_prior_knowledge: bool,
    /// Idle keep-alive connections kept per host (SDK: 100). Over HTTP/1.1 each request
    /// in flight holds a connection of its own, and hyper keeps ~30 KB of buffers and
    /// state per connection: a host that once had 1,000 runs in flight would otherwise
    /// keep 1,000 sockets open between steps. Over HTTP/2 the requests share one.
    pub max_idle_connections: usize,
}

/// `Ok` when `base_url` is an absolute `http://` or `https://` URL, as a client needs.
pub fn check_base_url(base_url: &str) -> Result<(), ClientError> {
    match reqwest::Url::parse(base_url) {
        Ok(url) if matches!(url.scheme(), "http" | "https") => Ok(()),
        _ => Err(ClientError::InvalidBaseUrl(base_url.to_owned())),
    }
}

impl ClientConfig {
    /// Config with the SDK defaults for `base_url` and `api_key`.
    pub fn new(base_url: impl Into<String>, api_key: ApiKey) -> Self {
        Self {
            base_url: base_url.into().trim_end_matches('/').to_owned(),
            api_key,
            retry: RetryPolicy::default(),
            connect_timeout: Duration::from_secs(5),
            read_timeout: Duration::from_secs(600),
            stream_idle_timeout: Duration::from_secs(600),
            user_agent: concat!("agentctl-responses/", env!("CARGO_PKG_VERSION")).to_owned(),
            http2_prior_knowledge: false,
            max_idle_connections: 100,
        }
    }

    /// Base URL from `base_url_flag`, else `OPENAI_BASE_URL`, else the public API; key from
    /// `OPENAI_API_KEY` (an error when unset). An `OPENAI_BASE_URL` that is not text is an
    /// error, not unset: requests meant for another server must not go to the public API.
    pub fn from_env(base_url_flag: Option<&str>) -> Result<Self, ClientError> {
        let key = ApiKey::from_env().ok_or(ClientError::MissingApiKey)?;
        let from_env = match std::env::var("OPENAI_BASE_URL") {
            Ok(v) => Some(v).filter(|v| !v.trim().is_empty()),
            Err(std::env::VarError::NotPresent) => None,
            Err(std::env::VarError::NotUnicode(raw)) if base_url_flag.is_none() => {
                return Err(ClientError::InvalidBaseUrl(format!(
                    "{} (OPENAI_BASE_URL is not UTF-8)",
                    raw.to_string_lossy()
                )));
            }
            Err(std::env::VarError::NotUnicode(_)) => None,
        };
        let base = base_url_flag
            .map(str::to_owned)
            .or(from_env)
            .unwrap_or_else(|| DEFAULT_BASE_URL.to_owned());
        Ok(Self::new(base, key))
    }
}

#[cfg(test)]
mod tests {
    use super::ApiKey;

    #[test]
    fn mask_hides_the_key_whole_and_cut_at_the_end() {
        let key = ApiKey::new("sk-test-SECRET-123").unwrap();
        assert_eq!(
            key.mask("a sk-test-SECRET-123 b sk-test-SECRET-123"),
            "a *** b ***"
        );
        assert_eq!(key.mask("cut here: sk-test-SE"), "cut here: ***");
        // Too short a start to give anything away is left alone, as is other text.
        assert_eq!(key.mask("ends in sk-"), "ends in sk-");
        assert_eq!(key.mask("nothing secret"), "nothing secret");
    }
}
