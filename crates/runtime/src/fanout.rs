//! Fan-out: run several calls concurrently, wait for all to settle, validate every output
//! against a declared shape, and report `complete` or `partial`, never a
//! partial result passed off as complete.
//!
//! Invariants: every input appears exactly once, either among the rows it contributed or
//! in `failures` (a call that failed, or whose output broke the shape); one input's failure
//! never hides another's findings.

use std::future::Future;

use serde::Serialize;
use serde_json::Value;

/// Whether every input succeeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FanOutStatus {
    /// Every input produced valid rows.
    Complete,
    /// At least one input failed; `failures` lists them and `findings` holds the rest.
    Partial,
}

/// One input that produced no valid output.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Failure {
    /// The input that failed.
    pub input: String,
    /// Why: the call's error or the first row that broke the shape.
    pub error: String,
}

/// The settled fan-out.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FanOutReport {
    /// `complete` only when `failures` is empty.
    pub status: FanOutStatus,
    /// Valid rows the `keep` predicate selected, in input order.
    pub findings: Vec<Value>,
    /// The inputs without valid output, in input order.
    pub failures: Vec<Failure>,
}

/// A declared output shape: each call returns an array of rows; each row must pass `check`.
pub trait Shape {
    /// `Ok` when `row` has the shape; otherwise why not (reported as the input's failure).
    fn check(&self, row: &Value) -> Result<(), String>;
}

/// The demo's finding row: non-empty `file` and `evidence` strings, `severity` in an
/// allowed set.
#[derive(Debug, Clone)]
pub struct FindingShape {
    /// The allowed values of `severity`.
    pub severities: Vec<String>,
}

impl Default for FindingShape {
    fn default() -> Self {
        FindingShape {
            severities: vec!["low".into(), "high".into()],
        }
    }
}

impl Shape for FindingShape {
    fn check(&self, row: &Value) -> Result<(), String> {
        let non_empty = |field: &str| {
            row.get(field)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(|_| ())
                .ok_or_else(|| format!("bad tool output: `{field}` must be a non-empty string"))
        };
        non_empty("file")?;
        non_empty("evidence")?;
        match row.get("severity").and_then(Value::as_str) {
            Some(s) if self.severities.iter().any(|a| a == s) => Ok(()),
            _ => Err(format!(
                "bad tool output: `severity` must be one of {}",
                self.severities.join(", ")
            )),
        }
    }
}

/// Runs `call` for every input concurrently, waits for all of them, validates each output
/// with `shape` and keeps the rows `keep` selects.
///
/// # Cancel safety
///
/// The calls run inside this future, not in tasks of their own: dropping it drops every
/// call not yet settled (what each leaves behind is up to `call`'s own cancel safety) and
/// discards the outputs already in. Nothing else is left running.
pub async fn fan_out<F, Fut>(
    inputs: &[String],
    call: F,
    shape: &dyn Shape,
    keep: impl Fn(&Value) -> bool,
) -> FanOutReport
where
    F: Fn(String) -> Fut,
    Fut: Future<Output = Result<Value, String>>,
{
    let settled = futures::future::join_all(inputs.iter().cloned().map(&call)).await;
    let mut findings = Vec::new();
    let mut failures = Vec::new();
    for (input, result) in inputs.iter().zip(settled) {
        let rows = result.and_then(|value| match value {
            Value::Array(rows) => {
                for row in &rows {
                    shape.check(row)?;
                }
                Ok(rows)
            }
            _ => Err("bad tool output: expected an array of rows".to_string()),
        });
        match rows {
            Ok(rows) => findings.extend(rows.into_iter().filter(|r| keep(r))),
            Err(error) => failures.push(Failure {
                input: input.clone(),
                error,
            }),
        }
    }
    FanOutReport {
        status: if failures.is_empty() {
            FanOutStatus::Complete
        } else {
            FanOutStatus::Partial
        },
        findings,
        failures,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demo::demo_scan;
    use serde_json::json;

    fn high(row: &Value) -> bool {
        row.get("severity").and_then(Value::as_str) == Some("high")
    }

    #[tokio::test]
    async fn the_demo_story_is_partial_with_one_finding_and_one_failure() {
        let inputs: Vec<String> = ["api", "ui", "unknown"].map(String::from).to_vec();
        let report = fan_out(&inputs, demo_scan, &FindingShape::default(), high).await;
        assert_eq!(report.status, FanOutStatus::Partial);
        assert_eq!(report.findings.len(), 1);
        assert_eq!(report.findings[0]["file"], "api.py");
        assert_eq!(
            report.failures,
            vec![Failure {
                input: "unknown".into(),
                error: "missing fixture: unknown".into()
            }]
        );
    }

    #[tokio::test]
    async fn all_known_inputs_are_complete() {
        let inputs: Vec<String> = ["api", "ui"].map(String::from).to_vec();
        let report = fan_out(&inputs, demo_scan, &FindingShape::default(), high).await;
        assert_eq!(report.status, FanOutStatus::Complete);
        assert!(report.failures.is_empty());
    }

    #[tokio::test]
    async fn bad_output_is_a_failure_of_its_input_only() {
        let inputs: Vec<String> = ["good", "bad", "notarray"].map(String::from).to_vec();
        let call = |m: String| async move {
            match m.as_str() {
                "good" => Ok(json!([{"file": "a", "severity": "high", "evidence": "e"}])),
                "bad" => Ok(json!([{"file": "", "severity": "high", "evidence": "e"}])),
                _ => Ok(json!({"file": "a"})),
            }
        };
        let report = fan_out(&inputs, call, &FindingShape::default(), high).await;
        assert_eq!(report.status, FanOutStatus::Partial);
        assert_eq!(report.findings.len(), 1);
        let failed: Vec<&str> = report.failures.iter().map(|f| f.input.as_str()).collect();
        assert_eq!(failed, ["bad", "notarray"]);
        assert!(report.failures[0].error.contains("bad tool output"));
    }

    #[tokio::test]
    async fn calls_overlap() {
        // Each call waits until all three have started: only concurrent execution finishes.
        let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(3));
        let inputs: Vec<String> = ["api", "ui", "unknown"].map(String::from).to_vec();
        let call = |m: String| {
            let barrier = barrier.clone();
            async move {
                barrier.wait().await;
                demo_scan(m).await
            }
        };
        let report = fan_out(&inputs, call, &FindingShape::default(), high).await;
        assert_eq!(report.failures.len(), 1);
    }
}
