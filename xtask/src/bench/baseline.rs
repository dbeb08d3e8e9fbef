//! Running the seed's Python baselines from `../shared/baseline` in the same bench run.
//!
//! The scripts append their results under `baseline/results/`; `shared/` is read-only, so
//! they run from a private copy of `baseline/` and `seed/` in a temp folder.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context as _;

use crate::process::{output, shared_dir};

/// A temp copy of `shared/baseline` and `shared/seed`, removed on drop.
pub struct BaselineDir {
    root: PathBuf,
}

impl BaselineDir {
    pub fn new() -> anyhow::Result<Self> {
        let root = std::env::temp_dir().join(format!("agentctl-baseline-{}", std::process::id()));
        let shared = shared_dir();
        for part in ["baseline", "seed"] {
            copy_dir(&shared.join(part), &root.join(part)).with_context(|| {
                format!("cannot copy shared/{part}; is ../shared beside the checkout?")
            })?;
        }
        Ok(BaselineDir { root })
    }

    /// The copied seed folder (to import the seed's classes from ad-hoc scripts).
    pub fn seed(&self) -> PathBuf {
        self.root.join("seed")
    }

    /// Runs `python3 baseline/SCRIPT` with `env` and returns its JSON lines.
    pub fn run_script(
        &self,
        script: &str,
        env: &[(&str, &str)],
    ) -> anyhow::Result<Vec<serde_json::Value>> {
        let mut cmd = Command::new("python3");
        cmd.arg(self.root.join("baseline").join(script))
            .current_dir(self.root.join("baseline"));
        for (k, v) in env {
            cmd.env(k, v);
        }
        parse_lines(&output(&mut cmd)?)
    }

    /// Runs `python3 -c CODE` with the seed importable; returns its JSON lines.
    pub fn run_code(&self, code: &str) -> anyhow::Result<Vec<serde_json::Value>> {
        let mut cmd = Command::new("python3");
        cmd.arg("-c")
            .arg(code)
            .current_dir(self.seed())
            .env("PYTHONPATH", self.seed());
        parse_lines(&output(&mut cmd)?)
    }
}

impl Drop for BaselineDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Parses every line that is a JSON object; lines that do not start with `{` (progress
/// text) are ignored. A line that starts with `{` and does not parse fails the whole
/// output: it is a measurement cut short or mangled, and skipping it would drop its row
/// without a word.
pub fn parse_lines(text: &str) -> anyhow::Result<Vec<serde_json::Value>> {
    text.lines()
        .filter(|l| l.trim_start().starts_with('{'))
        .map(|l| {
            serde_json::from_str(l).with_context(|| format!("a measurement line is not JSON: {l}"))
        })
        .collect()
}

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
            let mut perms = std::fs::metadata(&target)?.permissions();
            #[allow(clippy::permissions_set_readonly_false)]
            perms.set_readonly(false);
            std::fs::set_permissions(&target, perms)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_lines;

    #[test]
    fn a_mangled_measurement_line_fails_instead_of_vanishing() {
        let lines = parse_lines("progress 1/3\n{\"a\": 1}\n  {\"b\": 2}\n").unwrap();
        assert_eq!(lines.len(), 2);
        let err = parse_lines("{\"a\": 1}\n{\"rate\": 12\n").unwrap_err();
        assert!(format!("{err:#}").contains("{\"rate\": 12"), "{err:#}");
        // Python's json.dumps writes NaN for a float NaN, which is not JSON.
        assert!(parse_lines("{\"median\": NaN}").is_err());
    }
}
