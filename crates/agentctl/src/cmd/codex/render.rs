//! How a Codex turn looks: the agent's text on stdout and the rest on stderr, or JSON lines
//! (`docs/cli-json.md`: `codex.thread`, `codex.notification`, `codex.server_request`,
//! `codex.turn`).
//!
//! Invariant: the API key never reaches stdout or stderr. The driver masks it in every
//! event ([`agent_host::codex::clean_event`]); the agent's text also passes a
//! [`StreamMask`], which masks a key that deltas split.

use agent_appserver::AppServerEvent;
use agent_host::codex::{TurnEvent, TurnReport, reply_json};
use agent_host::tools::StreamMask;
use serde_json::{Value, json};

use crate::output::{self, typed_line};

/// Prints the end of the turn: its JSON line, or a note when it was interrupted.
pub fn turn_ended(json: bool, report: &TurnReport) -> anyhow::Result<()> {
    let turn = &report.turn;
    let given_up = report.given_up.as_ref().map(ToString::to_string);
    let not_sent: Vec<&str> = report.not_sent.iter().map(|c| c.as_str()).collect();
    if json {
        typed_line(
            "codex.turn",
            json!({"thread_id": report.thread_id, "turn_id": turn.id,
                   "status": turn.status.as_str(), "error": turn.error,
                   "given_up": given_up, "not_sent": not_sent}),
        )
    } else {
        for control in &report.not_sent {
            let option = match control {
                agent_host::codex::NotSent::Steer => "--steer",
                agent_host::codex::NotSent::Interrupt => "--interrupt-after",
            };
            output::note(&format!(
                "agentctl: warning: {option} was never sent: the turn ended before the agent's text reached it"
            ));
        }
        match given_up {
            // Codex did not end the turn itself: the server was stopped instead.
            Some(why) => output::note(&format!(
                "agentctl: gave up on the turn and stopped the app-server: {why}"
            )),
            None if turn.status == agent_appserver::TurnStatus::Interrupted => {
                output::note("agentctl: the turn was interrupted");
            }
            None => {}
        }
        Ok(())
    }
}

/// Shows the turn: the agent's text on stdout, the rest on stderr (or JSON lines).
pub struct Printer {
    json: bool,
    /// The agent's text so far does not end with a newline.
    mid_line: bool,
    /// Masks the API key in the agent's text, also split across deltas.
    mask: StreamMask,
}

impl Printer {
    /// A printer for human text, or JSON lines.
    pub fn new(json: bool) -> Self {
        Printer {
            json,
            mid_line: false,
            mask: StreamMask::new(agent_host::tools::api_key().map(str::to_owned)),
        }
    }

    /// Shows one step of the turn.
    pub fn show(&mut self, event: TurnEvent<'_>) -> anyhow::Result<()> {
        match event {
            TurnEvent::ThreadStarted {
                thread_id,
                model,
                model_provider,
            } => {
                if self.json {
                    typed_line(
                        "codex.thread",
                        json!({"thread_id": thread_id, "model": model, "model_provider": model_provider}),
                    )?;
                } else {
                    output::note(&format!("agentctl: codex thread {thread_id}"));
                }
            }
            TurnEvent::Server(event) => self.server_event(event)?,
            TurnEvent::AgentText(delta) if !self.json => {
                let shown = self.mask.push(delta);
                self.agent_text(&shown)?;
            }
            TurnEvent::AgentMessageBoundary | TurnEvent::TurnCompleted(_) if !self.json => {
                self.end_line()?;
            }
            // The turn may have finished first; the turn's own end decides the outcome.
            TurnEvent::SteerFailed(err) => output::note(&format!("agentctl: steer failed: {err}")),
            TurnEvent::InterruptFailed(err) => {
                output::note(&format!("agentctl: interrupt failed: {err}"));
            }
            TurnEvent::InterruptSignalled => {
                output::note("agentctl: interrupting the turn (Ctrl-C or SIGTERM)");
            }
            // Nothing from Codex for a while (it retries an unreachable model by itself).
            TurnEvent::Quiet(after) => output::note(&format!(
                "agentctl: no event from Codex for {} s; still waiting (Ctrl-C interrupts the turn, a second Ctrl-C gives up on it)",
                after.as_secs()
            )),
            TurnEvent::AgentText(_)
            | TurnEvent::AgentMessageBoundary
            | TurnEvent::TurnCompleted(_)
            | TurnEvent::SteerAccepted { .. }
            | TurnEvent::InterruptAccepted => {}
        }
        Ok(())
    }

    /// Ends the agent's text with a newline if it stopped mid-line (a failed or abandoned
    /// turn), so that the notes and errors after it start on a line of their own.
    pub fn end_line(&mut self) -> anyhow::Result<()> {
        let held = self.mask.flush();
        self.agent_text(&held)?;
        if self.mid_line && !self.json {
            self.text("\n")?;
            self.mid_line = false;
        }
        Ok(())
    }

    /// Shows a piece of the agent's text (already masked).
    fn agent_text(&mut self, text: &str) -> anyhow::Result<()> {
        if !text.is_empty() {
            self.text(text)?;
            self.mid_line = !text.ends_with('\n');
        }
        Ok(())
    }

    fn text(&mut self, text: &str) -> anyhow::Result<()> {
        Ok(output::stream(text)?)
    }

    fn server_event(&mut self, event: &AppServerEvent) -> anyhow::Result<()> {
        match event {
            AppServerEvent::Notification(note) if self.json => typed_line(
                "codex.notification",
                json!({"method": note.method, "params": note.params}),
            ),
            AppServerEvent::Request { request, reply } => {
                let reply = reply_json(reply);
                if self.json {
                    typed_line(
                        "codex.server_request",
                        json!({"method": request.method, "params": request.params, "reply": reply}),
                    )
                } else {
                    let what = request
                        .params
                        .get("command")
                        .and_then(Value::as_str)
                        .unwrap_or(&request.method);
                    output::note(&format!(
                        "agentctl: {} asked: {what} -> answered {reply}",
                        request.method
                    ));
                    Ok(())
                }
            }
            AppServerEvent::Notification(_) => Ok(()),
        }
    }
}
