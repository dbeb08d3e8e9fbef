//! A `CODEX_HOME` that makes a local Responses endpoint Codex's model provider
//! (`model_providers` in <https://github.com/openai/codex/blob/main/docs/config.md>,
//! verified with Codex CLI 0.171).
//!
//! Invariants: the provider is a *custom* one (plain `POST {base_url}/responses` with SSE,
//! no WebSocket attempt, local compaction); the model slug is not in Codex's bundled
//! catalog, so Codex sends the classic `tools` array; retries are off so a broken stream
//! fails the turn at once instead of being replayed; plugins are off, so Codex does not
//! sync its curated plugins from GitHub at startup (it tried, even offline).

use std::path::Path;

/// The provider id written into `config.toml`.
pub const PROVIDER_ID: &str = "agentctl_emulator";
/// The environment variable Codex reads the bearer key from.
pub const PROVIDER_KEY_ENV: &str = "AGENTCTL_EMULATOR_API_KEY";
/// A model slug unknown to Codex's catalog (so it uses its fallback metadata).
pub const EMULATED_MODEL: &str = "agentctl-emulated-model";

/// The `config.toml` text for a provider at `base_url` (e.g. `http://127.0.0.1:PORT/v1`).
pub fn provider_config(base_url: &str) -> String {
    let base_url = toml_string(base_url);
    format!(
        "# Written by agentctl: Codex's model provider is a local Responses emulator.\n\
         model = \"{EMULATED_MODEL}\"\n\
         model_provider = \"{PROVIDER_ID}\"\n\
         \n\
         # Offline: no sync of the curated plugins from GitHub at startup.\n\
         [features]\n\
         plugins = false\n\
         \n\
         [model_providers.{PROVIDER_ID}]\n\
         name = \"agentctl Responses emulator\"\n\
         base_url = {base_url}\n\
         env_key = \"{PROVIDER_KEY_ENV}\"\n\
         wire_api = \"responses\"\n\
         request_max_retries = 0\n\
         stream_max_retries = 0\n"
    )
}

/// Writes `config.toml` for `base_url` into `codex_home` (created if needed).
pub fn write_provider_config(codex_home: &Path, base_url: &str) -> std::io::Result<()> {
    std::fs::create_dir_all(codex_home)?;
    std::fs::write(codex_home.join("config.toml"), provider_config(base_url))
}

/// A TOML basic string.
fn toml_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_names_the_provider_and_escapes_the_url() {
        let text = provider_config("http://127.0.0.1:9/v1");
        assert!(text.contains("model_provider = \"agentctl_emulator\""));
        assert!(text.contains("base_url = \"http://127.0.0.1:9/v1\""));
        assert!(text.contains("wire_api = \"responses\""));
        // Offline: Codex 0.171 syncs its curated plugins from github.com unless told not to.
        assert!(text.contains("[features]\nplugins = false\n"));
        assert_eq!(toml_string("a\"b\\c"), "\"a\\\"b\\\\c\"");
    }
}
