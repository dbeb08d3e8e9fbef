//! How a run looks: human text (the model's words stream; one line per tool call and per
//! approval), or JSON lines in the `codex exec --json` shapes (`docs/cli-json.md`).

use std::sync::{Arc, Mutex};

use agent_host::run::events::RunEvent;
use agent_host::run::exec_json::ExecJson;
use agent_host::run::kinds as k;
use agent_host::run::{CallRecord, Decider, Decision, Observer, RunEnd, RunReport, RunState};
use agent_journal::Event;
use futures::future::BoxFuture;

use crate::global::GlobalArgs;
use crate::output;

/// The observer for `--json` or human output. A `structured` run (one with an output
/// schema) keeps stdout for its parsed answer: its progress and streamed text go to stderr.
pub fn observer(json: bool, structured: bool) -> Arc<dyn Observer> {
    if json {
        Arc::new(JsonLines(Mutex::new(None)))
    } else {
        Arc::new(Human(Mutex::new(HumanState {
            in_text: false,
            structured,
        })))
    }
}

struct JsonLines(Mutex<Option<ExecJson>>);

impl Observer for JsonLines {
    fn event(&self, state: &RunState, event: &Event) {
        let mut guard = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // The first event seen is `run.created` (a new run) or `run.resumed`, folded into a
        // state that already holds the run's past.
        let conv = guard.get_or_insert_with(|| {
            if &*event.kind == k::RUN_RESUMED {
                ExecJson::resuming(state)
            } else {
                ExecJson::new(state.id())
            }
        });
        for line in conv.convert(event) {
            // A closed stdout is the reader's choice; the run goes on.
            let _ = output::json_line(&line);
        }
    }
}

struct HumanState {
    /// The model's text is mid-line.
    in_text: bool,
    /// Everything goes to stderr: stdout is for the parsed answer alone.
    structured: bool,
}

impl HumanState {
    fn print(&self, text: &str) {
        if self.structured {
            output::note(text);
        } else {
            let _ = output::line(text);
        }
    }
}

struct Human(Mutex<HumanState>);

impl Human {
    fn say(&self, text: &str) {
        let mut st = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if st.in_text {
            st.print("");
            st.in_text = false;
        }
        st.print(text);
    }

    /// Ends the model's streamed text of a structured run with a newline: its answer is
    /// echoed on stderr, where the next note (the run's end) would run on from it. (Other
    /// runs stream to stdout, which [`finish`] ends.)
    fn end_streamed_text(&self) {
        let mut st = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if st.structured && st.in_text {
            output::note("");
            st.in_text = false;
        }
    }
}

fn first_line(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or("");
    if line.chars().count() > max {
        format!("{}...", line.chars().take(max).collect::<String>())
    } else {
        line.to_string()
    }
}

impl Observer for Human {
    fn event(&self, state: &RunState, event: &Event) {
        let Ok(Some(parsed)) = RunEvent::parse(&event.kind, &event.payload) else {
            return;
        };
        match parsed {
            RunEvent::ModelCompleted(completed) => {
                // A refusal is the model's answer too, though it was not streamed.
                if let Some(refusal) = completed.refusal() {
                    self.text_delta(&refusal);
                }
                self.end_streamed_text();
            }
            RunEvent::Created(created) => {
                output::note(&format!(
                    "run {} started (workspace {})",
                    state.id(),
                    created.spec.workspace
                ));
            }
            RunEvent::Resumed(_) => output::note(&format!("run {} resumed", state.id())),
            RunEvent::ToolScheduled(scheduled) => {
                if let Some(call) = state.call(&scheduled.call_id) {
                    self.say(&format!(
                        "-> {} {}",
                        call.name,
                        first_line(&call.arguments, 100)
                    ));
                }
            }
            RunEvent::ToolEnded(ended) => {
                if let Some(call) = state.call(&ended.call_id) {
                    let status = ended.outcome.kind().trim_start_matches("tool.");
                    let detail = match &call.progress {
                        agent_host::run::state::CallProgress::Done(out) => {
                            first_line(&out.text, 100)
                        }
                        _ => String::new(),
                    };
                    self.say(&format!("   {} {status}: {detail}", call.name));
                }
            }
            RunEvent::ToolRefused(refused) => {
                self.say(&format!("   {} refused: {}", refused.tool, refused.message));
            }
            RunEvent::ApprovalRequested(requested) => self.say(&format!(
                "?? {} {} needs approval ({})",
                requested.tool,
                first_line(&requested.arguments, 100),
                requested.reason
            )),
            RunEvent::ApprovalDecided(decided) => self.say(&format!(
                "   {} {} by {}",
                decided.call_id,
                if decided.decision.approve {
                    "approved"
                } else {
                    "denied"
                },
                decided.decision.by.as_deref().unwrap_or("someone")
            )),
            RunEvent::SteerApplied(applied) => {
                let text = state
                    .steers()
                    .iter()
                    .find(|st| st.id == applied.id)
                    .map(|st| st.text.as_str())
                    .unwrap_or_default();
                self.say(&format!(
                    "~~ steer {} applied: {}",
                    applied.id,
                    first_line(text, 100)
                ));
            }
            RunEvent::SteerDropped(dropped) => {
                self.say(&format!(
                    "~~ steer {} dropped: {}",
                    dropped.id, dropped.reason
                ));
            }
            RunEvent::OutputRejected(rejected) => {
                self.say(&format!(
                    "!! the answer does not match the output schema (retry {}): {}",
                    rejected.retry,
                    rejected.errors.join("; ")
                ));
            }
            RunEvent::ModelFailed(failed) => {
                self.say(&format!("!! model call failed: {}", failed.message));
            }
            RunEvent::SubagentSpawned(spawned) => self.say(&format!(
                ">> sub-agent {} started: {} (its approvals: runs show {})",
                spawned.child_run_id,
                first_line(&spawned.prompt, 80),
                state.id()
            )),
            RunEvent::SubagentEnded(ended) => self.say(&format!(
                "<< sub-agent {} {}: {}",
                ended.child_run_id,
                ended.status.as_str(),
                first_line(
                    ended
                        .answer
                        .as_deref()
                        .or(ended.error.as_deref())
                        .unwrap_or(""),
                    100
                )
            )),
            _ => {}
        }
    }

    fn text_delta(&self, delta: &str) {
        let mut st = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        st.in_text = !delta.ends_with('\n');
        if st.structured {
            output::ask(delta);
        } else {
            let _ = output::stream(delta);
        }
    }
}

/// Prints the end of a drive: on stdout the final text (human; the JSON lines already said
/// it), on stderr the run id and what to do next.
pub fn finish(global: &GlobalArgs, report: &RunReport) -> anyhow::Result<()> {
    let json = global.json;
    let id = &report.run_id;
    match &report.end {
        RunEnd::Completed { .. } => {
            // With an output schema: the parsed answer, as one line of JSON (`| jq`).
            match report.output() {
                Some(parsed) if !json => output::line(&output::json_text(parsed)?)?,
                _ if !json => output::line("")?,
                _ => {}
            }
            output::note(&format!(
                "run {id} completed in {} steps ({} tokens)",
                report.state.step_count(),
                report.state.usage().total_tokens
            ));
        }
        RunEnd::Paused { reason, detail } => {
            output::note(&format!("run {id} paused ({reason}): {detail}"));
            // Its own calls, then its sub-agents', each decided by the run that asks.
            let own = report
                .state
                .pending_approvals()
                .map(|call| (id.as_str(), call));
            let children = report
                .waiting_children
                .iter()
                .map(|w| (w.run_id.as_str(), &w.call));
            for (run, call) in own.chain(children) {
                if let Some(pending) = call.pending_approval() {
                    let whose = if run == id {
                        String::new()
                    } else {
                        format!(" (sub-agent {run})")
                    };
                    // The call id is the model's: quoted, it stays one word when pasted.
                    output::note(&format!(
                        "  {} {} wants{whose}: {}\n    {}\n    {}",
                        call.call_id,
                        call.name,
                        first_line(&call.arguments, 200),
                        global.suggest(&[
                            "approve",
                            run,
                            &call.call_id,
                            "--sha256",
                            &pending.args_sha256
                        ]),
                        global.suggest(&["deny", run, &call.call_id, "--reason", "TEXT"]),
                    ));
                }
            }
            output::note(&format!(
                "continue with: {}",
                global.suggest(&["resume", id])
            ));
        }
        RunEnd::Failed { error } => {
            output::note(&format!("run {id} failed: {error}"));
        }
        RunEnd::Interrupted | RunEnd::Released => {
            output::note(&format!(
                "run {id} interrupted; continue with: {}",
                global.suggest(&["resume", id])
            ));
        }
    }
    Ok(())
}

/// Asks on the terminal: approve, deny, or approve the tool for the rest of the run.
pub struct TerminalDecider;

impl Decider for TerminalDecider {
    fn decide<'a>(
        &'a self,
        run_id: &'a str,
        call: &'a CallRecord,
        reason: agent_host::run::ApprovalReason,
    ) -> BoxFuture<'a, Option<Decision>> {
        let question = format!(
            "run {run_id}: {} wants to run\n  {}\n{}approve? [y]es / [n]o / [a]lways for {} in this run: ",
            call.name,
            call.arguments,
            if reason == agent_host::run::ApprovalReason::Indeterminate {
                "(it was cut off by a crash and may or may not have run) "
            } else {
                ""
            },
            call.name
        );
        Box::pin(async move {
            // Asks until the answer is one of the three; end of input is no answer.
            let answer = tokio::task::spawn_blocking(move || {
                output::ask(&question);
                loop {
                    let mut line = String::new();
                    match std::io::stdin().read_line(&mut line) {
                        Ok(0) | Err(_) => return None,
                        Ok(_) => {}
                    }
                    let word = line.trim().to_ascii_lowercase();
                    if ["y", "yes", "n", "no", "a", "always"].contains(&word.as_str()) {
                        return Some(word);
                    }
                    output::ask("please answer y, n or a: ");
                }
            })
            .await
            .ok()
            .flatten()?;
            let by = Some(super::super::decide::who());
            let (approve, scope) = match answer.as_str() {
                "y" | "yes" => (true, None),
                "a" | "always" => (true, Some(agent_host::run::events::DecisionScope::Run)),
                _ => (false, None),
            };
            Some(Decision {
                approve,
                reason: (!approve).then(|| "declined at the terminal".to_string()),
                by,
                scope,
            })
        })
    }
}
