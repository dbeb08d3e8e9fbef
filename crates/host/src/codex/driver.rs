//! Drives one whole Codex turn over an app-server connection.
//!
//! [`drive_turn`] performs the handshake, starts a thread and a turn, and consumes server
//! events until that turn completes. Invariants:
//! - Every server event that arrives, from the handshake on (also while a setup call is in
//!   flight), is journaled through the [`Recorder`] and shown to the observer, in arrival
//!   order: events that arrive during a setup call are buffered ([`while_buffering`]) so the
//!   event queue never fills up behind a response.
//! - The event queue is read at all times: steer and interrupt calls run on their own tasks
//!   and report back over a channel, so a slow answer never stalls the queue.
//! - The steer is sent at most once, at the first agent-message delta of our turn; the
//!   interrupt after `interrupt_after` deltas is sent at most once (`Some(0)`: as soon as
//!   Codex reports the turn started, since it refuses an interrupt before that).
//! - The turn's outcome is decided only by our turn's `turn/completed`: a failed steer or
//!   interrupt is reported to the observer, not returned as an error.
//! - On success every recorded event is durable before [`drive_turn`] returns.

use std::collections::VecDeque;
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use agent_appserver::{
    AppServerClient, AppServerError, AppServerEvent, ClientInfo, ConnectionLost, Events,
    ThreadStartParams, Turn, TurnNotification, TurnStartParams, UserInput,
};
use agent_journal::Journal;
use tokio::sync::mpsc;

use super::recorder::{Recorder, RecorderError};

/// Silence from Codex after which the observer hears [`TurnEvent::Quiet`] (Codex retries
/// an unreachable model by itself, silently).
pub const DEFAULT_QUIET_NOTICE: Duration = Duration::from_secs(15);

/// What to run: the prompt and how to treat the turn.
#[derive(Debug, Clone)]
pub struct TurnRequest {
    /// Our `clientInfo`; `name` becomes Codex's `originator`.
    pub client_info: ClientInfo,
    /// The user's prompt.
    pub prompt: String,
    /// The thread's working directory.
    pub cwd: PathBuf,
    /// Codex's `approvalPolicy` for the turn: `untrusted`, `on-request` or `never`.
    pub approval_policy: String,
    /// Steer the turn with this text at its first agent-message delta.
    pub steer: Option<String>,
    /// Interrupt the turn after this many agent-message deltas (0: once it has started).
    pub interrupt_after: Option<u64>,
    /// Silence after which the observer hears [`TurnEvent::Quiet`] (again after each).
    pub quiet_notice: Duration,
}

impl TurnRequest {
    /// `prompt` in `cwd`, approval policy `untrusted`, no steer, no interrupt.
    pub fn new(
        client_info: ClientInfo,
        prompt: impl Into<String>,
        cwd: impl Into<PathBuf>,
    ) -> Self {
        TurnRequest {
            client_info,
            prompt: prompt.into(),
            cwd: cwd.into(),
            approval_policy: "untrusted".into(),
            steer: None,
            interrupt_after: None,
            quiet_notice: DEFAULT_QUIET_NOTICE,
        }
    }
}

/// What happened during the turn, in order, for the caller to show.
#[derive(Debug)]
pub enum TurnEvent<'a> {
    /// The thread exists; later events belong to it.
    ThreadStarted {
        /// The Codex thread id (its journal thread).
        thread_id: &'a str,
        /// The model Codex reported, if any.
        model: Option<&'a str>,
        /// The model provider Codex reported, if any.
        model_provider: Option<&'a str>,
    },
    /// Any server event (already journaled); requests carry the reply we sent.
    Server(&'a AppServerEvent),
    /// A piece of our turn's agent message text.
    AgentText(&'a str),
    /// An agent message item started or completed: a partial line of text ends here.
    AgentMessageBoundary,
    /// Codex accepted the steer.
    SteerAccepted {
        /// The turn the steer went into.
        turn_id: &'a str,
    },
    /// The steer failed (the turn may have finished first).
    SteerFailed(&'a AppServerError),
    /// The interrupt signal fired; an interrupt is being sent.
    InterruptSignalled,
    /// Codex accepted an interrupt.
    InterruptAccepted,
    /// An interrupt failed (the turn may have finished first).
    InterruptFailed(&'a AppServerError),
    /// Nothing from Codex for this long; still waiting.
    Quiet(Duration),
    /// Our turn completed (with any status); the last event before the report.
    TurnCompleted(&'a Turn),
}

/// How the turn ended.
#[derive(Debug, Clone)]
pub struct TurnReport {
    /// Codex's thread id (also the journal thread).
    pub thread_id: String,
    /// The completed turn: its status and, for a failed turn, the error.
    pub turn: Turn,
}

/// Why the turn could not be driven to its end. `E` is the observer's error.
#[derive(Debug, thiserror::Error)]
pub enum DriveError<E> {
    /// A setup call (initialize, thread/start, turn/start) failed.
    #[error(transparent)]
    Setup(AppServerError),
    /// The connection ended before our turn completed.
    #[error("codex app-server stopped before the turn completed")]
    Stopped(#[source] AppServerError),
    /// The events could not be journaled.
    #[error(transparent)]
    Journal(#[from] RecorderError),
    /// The observer failed (for example, stdout was closed).
    #[error("cannot report the turn's progress: {0}")]
    Observer(E),
}

/// Results of steer/interrupt calls, sent while the event loop keeps consuming events.
enum Control {
    Steered(Result<String, AppServerError>),
    Interrupted(Result<(), AppServerError>),
}

/// Runs one turn: handshake, `thread/start`, `turn/start`, then events until our turn's
/// `turn/completed`. Events are journaled under the Codex thread id when `journal` is
/// given. Each time `interrupt_signal()` resolves (for example on Ctrl-C) an interrupt is
/// sent. `observe` sees every [`TurnEvent`]; its error ends the drive.
///
/// # Cancel safety
/// Not cancel-safe in the sense of resumable: dropping the future abandons the turn on the
/// Codex side (close the client to end it). Nothing leaks: events already recorded are
/// still journaled by the recorder's task, and pending steer or interrupt tasks finish on
/// their own.
pub async fn drive_turn<S, F, O, E>(
    client: &AppServerClient,
    events: &mut Events,
    request: &TurnRequest,
    journal: Option<Journal>,
    mut interrupt_signal: S,
    mut observe: O,
) -> Result<TurnReport, DriveError<E>>
where
    S: FnMut() -> F,
    F: Future<Output = ()>,
    O: FnMut(TurnEvent<'_>) -> Result<(), E>,
{
    // Events that arrive during the setup calls wait here; they are journaled under the
    // thread id like the rest.
    let mut early = VecDeque::new();
    while_buffering(
        events,
        &mut early,
        client.initialize(request.client_info.clone()),
    )
    .await
    .map_err(DriveError::Setup)?;
    let thread_params = ThreadStartParams {
        cwd: Some(request.cwd.display().to_string()),
        ..ThreadStartParams::default()
    };
    let thread = while_buffering(events, &mut early, client.thread_start(&thread_params))
        .await
        .map_err(DriveError::Setup)?;
    let thread_id = thread.thread.id;
    let recorder = Recorder::start(journal, thread_id.clone());
    observe(TurnEvent::ThreadStarted {
        thread_id: &thread_id,
        model: thread.model.as_deref(),
        model_provider: thread.model_provider.as_deref(),
    })
    .map_err(DriveError::Observer)?;
    let turn_params = TurnStartParams {
        thread_id: thread_id.clone(),
        input: vec![UserInput::text(&request.prompt)],
        approval_policy: Some(request.approval_policy.clone()),
        ..TurnStartParams::default()
    };
    let turn_id = while_buffering(events, &mut early, client.turn_start(&turn_params))
        .await
        .map_err(DriveError::Setup)?
        .turn
        .id;

    let controls = Controls::new(client, &thread_id, &turn_id);
    let (control_tx, mut control_rx) = mpsc::channel::<Control>(4);
    let mut steer = request.steer.clone();
    let mut interrupt_after = request.interrupt_after;
    let mut deltas = 0u64;

    let finished = loop {
        let event = match early.pop_front() {
            Some(event) => Some(event),
            None => tokio::select! {
                event = events.recv() => event,
                Some(control) = control_rx.recv() => {
                    let shown = match &control {
                        Control::Steered(Ok(id)) => {
                            tracing::info!(turn = %id, "steer accepted");
                            TurnEvent::SteerAccepted { turn_id: id }
                        }
                        Control::Steered(Err(err)) => TurnEvent::SteerFailed(err),
                        Control::Interrupted(Ok(())) => {
                            tracing::info!("interrupt accepted");
                            TurnEvent::InterruptAccepted
                        }
                        Control::Interrupted(Err(err)) => TurnEvent::InterruptFailed(err),
                    };
                    observe(shown).map_err(DriveError::Observer)?;
                    continue;
                }
                () = interrupt_signal() => {
                    observe(TurnEvent::InterruptSignalled).map_err(DriveError::Observer)?;
                    controls.interrupt(&control_tx);
                    continue;
                }
                () = tokio::time::sleep(request.quiet_notice) => {
                    observe(TurnEvent::Quiet(request.quiet_notice)).map_err(DriveError::Observer)?;
                    continue;
                }
            },
        };
        let Some(event) = event else {
            let reason = events.end_reason().unwrap_or(ConnectionLost::EndOfStream);
            recorder.finish().await?;
            return Err(DriveError::Stopped(AppServerError::ConnectionLost(reason)));
        };
        recorder.record(&event).await?;
        observe(TurnEvent::Server(&event)).map_err(DriveError::Observer)?;
        let AppServerEvent::Notification(note) = &event else {
            continue;
        };
        let typed = match TurnNotification::parse(note) {
            Ok(typed) => typed,
            Err(err) => {
                tracing::warn!(method = %note.method, error = %err, "unexpected notification shape");
                None
            }
        };
        match typed {
            Some(TurnNotification::AgentMessageDelta {
                turn_id: t, delta, ..
            }) if t == turn_id => {
                observe(TurnEvent::AgentText(&delta)).map_err(DriveError::Observer)?;
                deltas += 1;
                if let Some(text) = steer.take() {
                    controls.steer(text, &control_tx);
                }
                if interrupt_after.is_some_and(|n| deltas >= n) {
                    interrupt_after = None;
                    controls.interrupt(&control_tx);
                }
            }
            Some(
                TurnNotification::ItemStarted { item, .. }
                | TurnNotification::ItemCompleted { item, .. },
            ) if item.kind == "agentMessage" => {
                observe(TurnEvent::AgentMessageBoundary).map_err(DriveError::Observer)?;
            }
            // Codex refuses an interrupt until it reports the turn started.
            Some(TurnNotification::TurnStarted { turn, .. })
                if turn.id == turn_id && interrupt_after == Some(0) =>
            {
                interrupt_after = None;
                controls.interrupt(&control_tx);
            }
            Some(TurnNotification::TurnCompleted { turn, .. }) if turn.id == turn_id => {
                observe(TurnEvent::TurnCompleted(&turn)).map_err(DriveError::Observer)?;
                break turn;
            }
            _ => {}
        }
    };
    recorder.finish().await?;
    Ok(TurnReport {
        thread_id,
        turn: finished,
    })
}

/// Sends steer and interrupt calls for one turn on tasks of their own.
struct Controls {
    client: AppServerClient,
    thread_id: String,
    turn_id: String,
}

impl Controls {
    fn new(client: &AppServerClient, thread_id: &str, turn_id: &str) -> Self {
        Controls {
            client: client.clone(),
            thread_id: thread_id.to_owned(),
            turn_id: turn_id.to_owned(),
        }
    }

    fn steer(&self, text: String, tx: &mpsc::Sender<Control>) {
        let (client, tx, thread_id, turn_id) = self.parts(tx);
        tokio::spawn(async move {
            let result = client
                .turn_steer(&thread_id, &turn_id, vec![UserInput::text(text)])
                .await
                .map(|r| r.turn_id);
            // The loop may have ended first; then nobody needs the answer.
            let _ = tx.send(Control::Steered(result)).await;
        });
    }

    fn interrupt(&self, tx: &mpsc::Sender<Control>) {
        let (client, tx, thread_id, turn_id) = self.parts(tx);
        tokio::spawn(async move {
            let result = client.turn_interrupt(&thread_id, &turn_id).await;
            let _ = tx.send(Control::Interrupted(result)).await;
        });
    }

    fn parts(
        &self,
        tx: &mpsc::Sender<Control>,
    ) -> (AppServerClient, mpsc::Sender<Control>, String, String) {
        (
            self.client.clone(),
            tx.clone(),
            self.thread_id.clone(),
            self.turn_id.clone(),
        )
    }
}

/// Awaits `call` while moving arriving events into `early`, so that the event queue never
/// fills up behind the call's response.
///
/// # Cancel safety
/// Cancel-safe for events: one received is already in `early`. Dropping the future drops
/// `call` (whatever that means for it).
pub async fn while_buffering<T>(
    events: &mut Events,
    early: &mut VecDeque<AppServerEvent>,
    call: impl Future<Output = T>,
) -> T {
    tokio::pin!(call);
    loop {
        tokio::select! {
            out = &mut call => return out,
            Some(event) = events.recv() => early.push_back(event),
        }
    }
}
