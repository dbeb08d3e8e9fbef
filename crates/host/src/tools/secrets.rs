//! What no tool output and no child process of a run may carry: the API key and the
//! database URLs (which may hold a password).
//!
//! Invariants: every child a run starts (a `shell` command, an MCP server, the command of
//! `agentctl sandbox`) has the variables of [`HIDDEN_ENV`] removed from its environment;
//! every built-in tool's and MCP tool's output passes [`mask_key`] before it reaches the
//! model, the journal or the screen.

/// Variables a command started for a run never sees: the API key and the database URLs.
pub const HIDDEN_ENV: [&str; 3] = ["OPENAI_API_KEY", "AGENTCTL_DB", "AGENTCTL_TEST_PG_URL"];

/// `text` with this process's API key (`OPENAI_API_KEY`, when it has 8 characters or more)
/// replaced by `***`. A command cannot see the key in its own environment, but a file of
/// the workspace (`.env`) or a same-user process (`/proc/PPID/environ`) can hold it.
pub fn mask_key(text: String) -> String {
    match std::env::var("OPENAI_API_KEY") {
        Ok(key) if key.len() >= 8 => mask(text, &key),
        _ => text,
    }
}

/// `text` with every occurrence of `key` replaced by `***`.
fn mask(text: String, key: &str) -> String {
    if text.contains(key) {
        text.replace(key, "***")
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_occurrence_of_the_key_is_masked() {
        let key = "sk-test-SECRET123";
        assert_eq!(
            mask(format!("OPENAI_API_KEY={key}\nagain {key}"), key),
            "OPENAI_API_KEY=***\nagain ***"
        );
        assert_eq!(mask("nothing here".into(), key), "nothing here");
    }
}
