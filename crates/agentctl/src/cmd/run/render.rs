//! How a run looks: human text, or JSON lines in the `codex exec --json` shapes
//! (`docs/cli-json.md`).
//!
//! Human output. stdout carries the run's results: the model's text of each step, a line
//! per tool call, approval and sub-agent, and last the run's final answer, so that stdout
//! ends with exactly the final answer (`runs show --json`'s `final_text`, the API key masked
//! as `***`) and `agentctl run ... > answer.txt` keeps it. Diagnostics (a model call that
//! failed or restarts, a steer applied or dropped) and the run's end go to stderr.
//! - On a terminal the model's text streams as it arrives; only a tail that could be the
//!   start of the API key is held back, until the next delta shows whether it is (masked)
//!   or not ([`text`]).
//! - A model call retried after its stream was cut restarts the answer: what it showed
//!   stays, stderr says the answer starts again, and the new attempt's text starts on a
//!   line of its own.
//! - Off a terminal (a pipe, a file) nothing streams: each step's text is printed whole once
//!   the step completes, from its journaled response, so no abandoned attempt reaches stdout.
//! - Either way a step's text that was not streamed (a server that sends no deltas) is
//!   printed from its response, and the run's answer, once completed, is finished or printed
//!   again so that stdout ends with it; anything after it goes to stderr.
//! - A run with an output schema keeps stdout for its parsed answer ([`finish`]): its text
//!   streams on stderr, masked the same way.

mod text;

use std::io::IsTerminal as _;
use std::sync::{Arc, Mutex};

use agent_host::run::events::{ModelCompleted, RunEvent};
use agent_host::run::exec_json::{ExecJson, ExecLine};
use agent_host::run::kinds as k;
use agent_host::run::{
    CallRecord, Decider, Decision, Observer, PauseReason, RunEnd, RunReport, RunState,
};
use agent_journal::Event;
use futures::future::BoxFuture;

use crate::global::GlobalArgs;
use crate::output;
use text::{Completion, StepText};

/// The observer for `--json` or human output. A `structured` run (one with an output
/// schema) keeps stdout for its parsed answer: its progress and streamed text go to stderr.
pub fn observer(json: bool, structured: bool) -> Arc<dyn Observer> {
    if json {
        Arc::new(JsonLines(Mutex::new(None)))
    } else {
        let sink = if structured {
            TextSink::Echo
        } else if std::io::stdout().is_terminal() {
            TextSink::Live
        } else {
            TextSink::Steps
        };
        Arc::new(Human(Mutex::new(HumanState {
            sink,
            in_text: false,
            text: StepText::new(text::api_key()),
            answered: false,
        })))
    }
}

/// An observer that also keeps the id of the run it shows (set by the first event folded,
/// `run.created` for a new run), so that what went wrong after it can name the run.
pub struct IdKept {
    inner: Arc<dyn Observer>,
    id: Arc<std::sync::OnceLock<String>>,
}

impl IdKept {
    /// `inner`, and where the run's id will be once the first event is folded.
    pub fn wrap(inner: Arc<dyn Observer>) -> (Arc<dyn Observer>, Arc<std::sync::OnceLock<String>>) {
        let id = Arc::new(std::sync::OnceLock::new());
        let kept = IdKept {
            inner,
            id: Arc::clone(&id),
        };
        (Arc::new(kept), id)
    }
}

impl Observer for IdKept {
    fn event(&self, state: &RunState, event: &Event) {
        self.id.get_or_init(|| state.id().to_owned());
        self.inner.event(state, event);
    }

    fn text_delta(&self, delta: &str) {
        self.inner.text_delta(delta);
    }

    fn shows_progress(&self) -> bool {
        self.inner.shows_progress()
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

/// Where the model's text goes, and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TextSink {
    /// stdout, a terminal: streamed as it arrives.
    Live,
    /// stdout, not a terminal: each step's text once the step completes.
    Steps,
    /// stderr, streamed: a run with an output schema, whose stdout is its parsed answer.
    Echo,
}

struct HumanState {
    sink: TextSink,
    /// The model's text is mid-line.
    in_text: bool,
    /// The current model call's text: shown, held back.
    text: StepText,
    /// The run's answer is printed: stdout gets nothing more.
    answered: bool,
}

// A closed stdout is the reader's choice; the run goes on (hence the ignored results).
impl HumanState {
    /// The model's text, where it goes.
    fn emit(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        match self.sink {
            TextSink::Live | TextSink::Steps => {
                let _ = output::stream(text);
            }
            TextSink::Echo => output::ask(text),
        }
        self.in_text = !text.ends_with('\n');
    }

    /// Ends the model's text with a newline where it stopped mid-line.
    fn end_text(&mut self) {
        if self.in_text {
            match self.sink {
                TextSink::Live | TextSink::Steps => {
                    let _ = output::line("");
                }
                TextSink::Echo => output::note(""),
            }
            self.in_text = false;
            self.text.line_ended();
        }
    }

    /// A line of the run's progress: on stdout; on stderr after the answer, or beside a
    /// parsed answer.
    fn line(&mut self, line: &str) {
        self.end_text();
        if self.sink == TextSink::Echo || self.answered {
            output::note(line);
        } else {
            let _ = output::line(line);
            self.text.moved_on();
        }
    }

    /// A diagnostic: on stderr, on a line of its own.
    fn diagnostic(&mut self, line: &str) {
        self.end_text();
        output::note(line);
    }

    /// Prints what `completion` lacks of the text.
    fn complete(&mut self, completion: Completion) {
        match completion {
            Completion::Done => {}
            Completion::Rest(rest) => self.emit(&rest),
            Completion::Again(whole) => {
                self.diagnostic("-- the response's text, as it was received in full:");
                self.emit(&whole);
            }
        }
    }

    /// A model call starts: a retry restarts the answer its predecessor began.
    fn requested(&mut self, step: u64, attempt: u32) {
        let restarts = attempt > 1 && self.text.shown_any();
        self.end_text();
        if restarts {
            output::note(&format!(
                "-- step {step}: the model call was cut off and is tried again (attempt {attempt}); the answer starts again"
            ));
        }
        self.text.restart();
    }

    /// A step's response is in: the text the stream held back, or did not carry.
    fn step_completed(&mut self, completed: &ModelCompleted<'_>) {
        let held = self.text.flush();
        self.emit(&held);
        let step = completed.answer_text();
        let completion = self.text.complete(&step);
        self.complete(completion);
        // Echoed on stderr, where the next note (the run's end) would run on from it.
        if self.sink == TextSink::Echo {
            self.end_text();
        }
    }

    /// The run's answer: stdout ends with it.
    fn answer(&mut self, text: &str) {
        if self.sink != TextSink::Echo {
            let completion = self.text.complete(text);
            self.complete(completion);
        }
        self.end_text();
        self.answered = true;
    }
}

struct Human(Mutex<HumanState>);

impl Human {
    fn state(&self) -> std::sync::MutexGuard<'_, HumanState> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn say(&self, text: &str) {
        self.state().line(text);
    }

    fn diagnostic(&self, text: &str) {
        self.state().diagnostic(text);
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
            RunEvent::ModelRequested(requested) => {
                self.state().requested(requested.step, requested.attempt);
            }
            RunEvent::ModelCompleted(completed) => self.state().step_completed(&completed),
            RunEvent::Completed(completed) => self.state().answer(&completed.text),
            RunEvent::Paused(_) | RunEvent::Failed(_) | RunEvent::Interrupted(_) => {
                self.state().end_text();
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
                            format!(": {}", first_line(&out.text, 100))
                        }
                        // A retry-safe call the interrupt cut short stays open.
                        _ if ended.outcome == agent_host::run::events::ToolOutcome::Cancelled => {
                            " (resume runs it again)".into()
                        }
                        _ => String::new(),
                    };
                    self.say(&format!("   {} {status}{detail}", call.name));
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
                self.diagnostic(&format!(
                    "~~ steer {} applied: {}",
                    applied.id,
                    first_line(text, 100)
                ));
            }
            RunEvent::SteerDropped(dropped) => {
                self.diagnostic(&format!(
                    "~~ steer {} dropped: {}",
                    dropped.id, dropped.reason
                ));
            }
            RunEvent::OutputRejected(rejected) => {
                self.diagnostic(&format!(
                    "!! the answer does not match the output schema (retry {}): {}",
                    rejected.retry,
                    rejected.errors.join("; ")
                ));
            }
            RunEvent::ModelFailed(failed) => {
                let mut st = self.state();
                st.diagnostic(&format!("!! model call failed: {}", failed.message));
                st.text.restart();
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
        let mut st = self.state();
        // Off a terminal a step's text is printed once the step completes.
        if st.sink == TextSink::Steps {
            return;
        }
        let now = st.text.push(delta);
        st.emit(&now);
    }
}

/// Prints the end of a drive: on stdout the parsed answer of a run with an output schema
/// (human; the observer printed any other answer as the run completed, the JSON lines said
/// it), on stderr the run id and what to do next.
pub fn finish(global: &GlobalArgs, report: &RunReport) -> anyhow::Result<()> {
    let json = global.json;
    let id = &report.run_id;
    match &report.end {
        RunEnd::Completed { .. } => {
            // With an output schema: the parsed answer, as one line of JSON (`| jq`).
            if let Some(parsed) = report.output()
                && !json
            {
                output::line(&output::json_text(parsed)?)?;
            }
            output::note(&format!(
                "run {id} completed in {} steps ({} tokens)",
                report.state.step_count(),
                report.state.usage().total_tokens
            ));
        }
        RunEnd::Paused { reason, detail } => {
            output::note(&format!("run {id} paused ({reason}): {detail}"));
            if json {
                // The run's own requests were lines of the stream; its sub-agents' live in
                // their own runs: a script gets them here, to decide by the child's run id.
                for waiting in &report.waiting_children {
                    if let Some(pending) = waiting.call.pending_approval() {
                        output::json_line(&ExecLine::ApprovalRequested {
                            run_id: waiting.run_id.clone(),
                            call_id: waiting.call.call_id.clone(),
                            tool: waiting.call.name.clone(),
                            arguments: waiting.call.arguments.clone(),
                            args_sha256: pending.args_sha256.clone(),
                            reason: pending.reason,
                            round: pending.round,
                        })?;
                    }
                }
            }
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
                    // The round pins the question: a decision pasted late does not answer
                    // the call's next round (asked again after a crash, same arguments).
                    let round = pending.round.to_string();
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
                            &pending.args_sha256,
                            "--round",
                            &round
                        ]),
                        global.suggest(&[
                            "deny",
                            run,
                            &call.call_id,
                            "--round",
                            &round,
                            "--reason",
                            "TEXT"
                        ]),
                    ));
                }
            }
            // A budget pause resumes only with a higher budget (a resume without one is
            // refused): the command offers another budget's worth.
            let budgets = report.state.budgets();
            let raised = match reason {
                PauseReason::MaxSteps => {
                    let budget = budgets.map_or(1, |b| b.max_steps);
                    let used = report.state.step_count();
                    Some(("--max-steps", used.saturating_add(budget.max(1))))
                }
                PauseReason::MaxTokens => {
                    let used = report.state.usage().total_tokens;
                    let budget = budgets.and_then(|b| b.max_tokens).unwrap_or(used);
                    Some(("--max-tokens", used.saturating_add(budget.max(1))))
                }
                _ => None,
            };
            let raised = raised.map(|(flag, n)| (flag, n.to_string()));
            let mut words = vec!["resume", id.as_str()];
            if let Some((flag, n)) = &raised {
                words.extend([*flag, n.as_str()]);
            }
            let mcp = mcp_args(report);
            words.extend(mcp.iter().map(String::as_str));
            output::note(&format!("continue with: {}", global.suggest(&words)));
        }
        RunEnd::Failed { error } => {
            output::note(&format!("run {id} failed: {error}"));
        }
        RunEnd::Interrupted | RunEnd::Released => {
            let mcp = mcp_args(report);
            let mut words = vec!["resume", id.as_str()];
            words.extend(mcp.iter().map(String::as_str));
            output::note(&format!(
                "run {id} interrupted; continue with: {}",
                global.suggest(&words)
            ));
        }
    }
    Ok(())
}

/// The `--mcp NAME=...` arguments a resume of the run needs: every MCP server it used
/// that is not configured now as it ran (given to it with `--mcp`), as the run started it;
/// a resume refuses a run whose server is not configured.
fn mcp_args(report: &RunReport) -> Vec<String> {
    let Some(spec) = report.state.spec() else {
        return Vec::new();
    };
    if spec.mcp_servers.is_empty() {
        return Vec::new();
    }
    // A configuration that does not load now makes the resume fail on its own account:
    // every server is given then.
    let configured = agent_host::tools::ToolConfig::load(
        std::path::Path::new(&spec.workspace),
        crate::cmd::trust::config_dir().as_deref(),
    )
    .unwrap_or_default();
    spec.mcp_servers
        .iter()
        .filter(|record| {
            !configured
                .servers
                .get(&record.name)
                .is_some_and(|s| s.command == record.command && s.args == record.args)
        })
        .flat_map(|record| ["--mcp".to_string(), record.cli_spec()])
        .collect()
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
