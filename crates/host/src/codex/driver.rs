//! Drives one whole Codex turn over an app-server connection.
//!
//! [`drive_turn`] performs the handshake, starts a thread and a turn, and consumes server
//! events until that turn completes. Invariants:
//! - Every server event that arrives, from the handshake on (also while a setup call is in
//!   flight), is journaled through the [`Recorder`] and shown to the observer, in arrival
//!   order: events that arrive during a setup call are buffered ([`while_buffering`]) so the
//!   event queue never fills up behind a response.
//! - The event queue is read at all times: steer and interrupt calls run on their own tasks
//!   (`controls`) and report back over a channel, so a slow answer never stalls the queue.
//! - "Our turn" is the turn we started, in the thread we started: a notification counts as
//!   ours only when both its thread id and its turn id are ours.
//! - Every server event is cleaned before it is journaled or shown ([`clean_event`]: the
//!   API key masked, NUL replaced by U+FFFD). A key split across the deltas of one item
//!   (any notification with a string `delta` and an `itemId`) is masked too: a delta's
//!   tail that may start the key is held back and put before the item's next delta
//!   ([`StreamMask`]); one still held when the item completes is dropped from the deltas
//!   (the completed item carries the whole text, masked).
//! - The agent's text is shown once: its deltas as they come, and of a completed agent
//!   message the part no delta showed (all of it, when Codex sent it without deltas).
//! - The steer is sent at most once, at the first piece of our turn's agent text (a delta,
//!   or a message completed without deltas); the interrupt after `interrupt_after` pieces is
//!   sent at most once (`Some(0)`: as soon as Codex reports the turn started, since it
//!   refuses an interrupt before that). One the turn ended before is reported
//!   ([`TurnReport::not_sent`]), never silently dropped.
//! - The thread's working directory must be UTF-8 ([`DriveError::CwdNotUtf8`]): a lossy
//!   conversion would name another directory.
//! - The turn's outcome is decided by our turn's `turn/completed`, with two exceptions,
//!   both taken only after the events already queued were handled (one of them may be that
//!   `turn/completed`): when an interrupt fails or gets no answer, or when the interrupt
//!   signal fires a second time, the drive gives up on the turn ([`TurnReport::given_up`]);
//!   and a `turn/completed` that may be ours but does not parse is a
//!   [`DriveError::Protocol`]. A failed steer is only reported to the observer.
//! - The interrupt signal is listened to from the first event on, without gaps: its future
//!   is polled before anything else and lives until it fires.
//! - On success every recorded event is durable before [`drive_turn`] returns.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use agent_appserver::{
    AppServerClient, AppServerError, AppServerEvent, ClientInfo, ConnectionLost, Events,
    Notification, ThreadStartParams, Turn, TurnNotification, TurnStartParams, TurnStatus,
    UserInput,
};
use agent_journal::Journal;
use serde_json::{Map, Value, json};

use super::controls::{Control, Controls};
use super::recorder::{Recorder, RecorderError, clean_event};
use crate::tools::StreamMask;

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
    /// Steer the turn with this text at the first piece of its agent text (a delta, or a
    /// message completed without deltas).
    pub steer: Option<String>,
    /// Interrupt the turn after this many pieces of agent text (0: once it has started).
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
    /// A piece of our turn's agent message text: a delta, or the part of a completed
    /// message that no delta carried.
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
    /// The interrupt signal fired (the first time); an interrupt is being sent.
    InterruptSignalled,
    /// Codex accepted an interrupt.
    InterruptAccepted,
    /// An interrupt failed or got no answer: unless the turn's `turn/completed` was already
    /// queued, the drive gives up on the turn ([`GiveUp::InterruptFailed`]).
    InterruptFailed(&'a AppServerError),
    /// Nothing from Codex for this long; still waiting. Not sent while an interrupt waits
    /// for its answer (which, or whose timeout, ends the wait), nor once the interrupt
    /// signal fired (the next one gives up on the turn).
    Quiet(Duration),
    /// Our turn ended, with any status: Codex's `turn/completed`, or the turn the drive
    /// gave up on ([`TurnReport::given_up`]). The last event before the report.
    TurnCompleted(&'a Turn),
}

/// How the turn ended.
#[derive(Debug, Clone)]
pub struct TurnReport {
    /// Codex's thread id (also the journal thread).
    pub thread_id: String,
    /// The completed turn: its status and, for a failed turn, the error. When the drive
    /// gave up on the turn, a record made here: status `interrupted`, no items, and the
    /// error's `message` saying why (`gave up on the turn: ...`).
    pub turn: Turn,
    /// Set when Codex never reported the turn's end because the drive gave up waiting;
    /// the server should then be stopped (its turn may still be running).
    pub given_up: Option<GiveUp>,
    /// What the request asked to send that was never sent, because the turn ended first
    /// (in the order steer, interrupt).
    pub not_sent: Vec<NotSent>,
}

/// A control of the [`TurnRequest`] that was never sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotSent {
    /// The steer: the turn ended before any agent text.
    Steer,
    /// The interrupt after `interrupt_after` pieces of agent text: fewer came, or (for 0)
    /// Codex never reported the turn started.
    Interrupt,
}

impl NotSent {
    /// `steer` or `interrupt`.
    pub fn as_str(self) -> &'static str {
        match self {
            NotSent::Steer => "steer",
            NotSent::Interrupt => "interrupt",
        }
    }
}

/// Why the drive stopped waiting for Codex to end the turn.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GiveUp {
    /// An interrupt was refused or got no answer: Codex cannot be counted on to end the
    /// turn. Holds the interrupt call's error.
    #[error("codex app-server did not carry out the interrupt ({0})")]
    InterruptFailed(String),
    /// The interrupt signal fired again before Codex ended the turn.
    #[error("interrupted again before Codex ended the turn")]
    SignalledAgain,
}

/// Why the turn could not be driven to its end. `E` is the observer's error.
#[derive(Debug, thiserror::Error)]
pub enum DriveError<E> {
    /// A setup call (initialize, thread/start, turn/start) failed.
    #[error(transparent)]
    Setup(AppServerError),
    /// The thread's working directory is not valid UTF-8, which the protocol cannot carry.
    #[error("the working directory `{}` is not valid UTF-8", .0.display())]
    CwdNotUtf8(PathBuf),
    /// The connection ended before our turn completed.
    #[error("codex app-server stopped before the turn completed")]
    Stopped(#[source] AppServerError),
    /// Codex sent a `turn/completed` that may be our turn's but does not parse (no
    /// status, `turn: null`, ...): how the turn ended is unknown.
    #[error("codex app-server sent a malformed `{method}` for our turn: {error}")]
    Protocol {
        /// The notification's method.
        method: String,
        /// Why its params did not parse.
        error: serde_json::Error,
    },
    /// The events could not be journaled.
    #[error(transparent)]
    Journal(#[from] RecorderError),
    /// The observer failed (for example, stdout was closed).
    #[error("cannot report the turn's progress: {0}")]
    Observer(E),
}

/// What the event loop handles next.
enum Next {
    /// The interrupt signal fired.
    Signal,
    /// A steer or interrupt call ended.
    Control(Control),
    /// A server event; `None` once the connection has ended.
    Event(Option<AppServerEvent>),
    /// Nothing for `quiet_notice`.
    Quiet,
}

/// Runs one turn: handshake, `thread/start`, `turn/start`, then events until our turn's
/// `turn/completed`. Events are journaled under the Codex thread id when `journal` is
/// given. When `interrupt_signal()` resolves (for example on Ctrl-C) an interrupt is sent;
/// when it resolves again, the drive gives up on the turn at once, as it does when an
/// interrupt fails (see [`TurnReport::given_up`]). `observe` sees every [`TurnEvent`];
/// its error ends the drive.
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
    let Some(cwd) = request.cwd.to_str() else {
        return Err(DriveError::CwdNotUtf8(request.cwd.clone()));
    };
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
        cwd: Some(cwd.to_owned()),
        ..ThreadStartParams::default()
    };
    let thread = while_buffering(events, &mut early, client.thread_start(&thread_params))
        .await
        .map_err(DriveError::Setup)?;
    let thread_id = thread.thread.id;
    let mut recorder = Recorder::start(journal, thread_id.clone())?;
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

    let (controls, mut control_rx) = Controls::new(client, &thread_id, &turn_id);
    let ours = Ours {
        thread_id: &thread_id,
        turn_id: &turn_id,
    };
    let drain_limit = client.options().event_capacity;
    let mut pending = Pending {
        steer: request.steer.clone(),
        interrupt_after: request.interrupt_after,
        pieces: 0,
    };
    // Our turn's agent text shown so far, per message item (until the item completes).
    let mut streamed: HashMap<String, String> = HashMap::new();
    let mut delta_masks = DeltaMasks::new(crate::tools::api_key());
    // Lives until it fires, so that a listener it registers stays registered between events.
    let mut signal = std::pin::pin!(interrupt_signal());
    let mut signalled = false;
    let mut interrupts_in_flight = 0usize;
    // Decided, and taken once the events queued at the decision were handled.
    let mut giving_up: Option<GiveUp> = None;

    let finished = loop {
        if early.is_empty()
            && let Some(reason) = giving_up.take()
        {
            tracing::warn!("gave up on the turn: {reason}");
            let turn = given_up_turn(&turn_id, &reason);
            observe(TurnEvent::TurnCompleted(&turn)).map_err(DriveError::Observer)?;
            break (turn, Some(reason));
        }
        let quiet_allowed = !signalled && interrupts_in_flight == 0 && early.is_empty();
        // Biased: the signal first, so it is always polled (and listened to); buffered
        // events before new ones, so they keep their order.
        let next = tokio::select! {
            biased;
            () = &mut signal => Next::Signal,
            Some(control) = control_rx.recv() => Next::Control(control),
            Some(event) = async { early.pop_front() } => Next::Event(Some(event)),
            event = events.recv() => Next::Event(event),
            () = tokio::time::sleep(request.quiet_notice), if quiet_allowed => Next::Quiet,
        };
        let event = match next {
            Next::Signal => {
                signal.set(interrupt_signal());
                if signalled {
                    giving_up = Some(GiveUp::SignalledAgain);
                    drain_ready(events, &mut early, drain_limit);
                } else {
                    signalled = true;
                    observe(TurnEvent::InterruptSignalled).map_err(DriveError::Observer)?;
                    interrupts_in_flight += 1;
                    controls.interrupt();
                }
                continue;
            }
            Next::Control(control) => {
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
                if let Control::Interrupted(result) = control {
                    interrupts_in_flight = interrupts_in_flight.saturating_sub(1);
                    if let Err(err) = result {
                        giving_up.get_or_insert(GiveUp::InterruptFailed(err.to_string()));
                        drain_ready(events, &mut early, drain_limit);
                    }
                }
                continue;
            }
            Next::Quiet => {
                observe(TurnEvent::Quiet(request.quiet_notice)).map_err(DriveError::Observer)?;
                continue;
            }
            Next::Event(Some(mut event)) => {
                clean_event(&mut event);
                delta_masks.apply(&mut event);
                event
            }
            Next::Event(None) => {
                let reason = events.end_reason().unwrap_or(ConnectionLost::EndOfStream);
                recorder.finish().await?;
                return Err(DriveError::Stopped(AppServerError::ConnectionLost(reason)));
            }
        };
        recorder.record(&event).await?;
        observe(TurnEvent::Server(&event)).map_err(DriveError::Observer)?;
        let AppServerEvent::Notification(note) = &event else {
            continue;
        };
        let typed = match TurnNotification::parse(note) {
            Ok(typed) => typed,
            Err(error) if note.method == TURN_COMPLETED && ours.may_have_sent(note) => {
                recorder.finish().await?;
                return Err(DriveError::Protocol {
                    method: note.method.clone(),
                    error,
                });
            }
            Err(err) => {
                tracing::warn!(method = %note.method, error = %err, "unexpected notification shape");
                None
            }
        };
        match typed {
            Some(TurnNotification::AgentMessageDelta {
                thread_id: th,
                turn_id: t,
                item_id,
                delta,
            }) if ours.is(&th, &t) => {
                observe(TurnEvent::AgentText(&delta)).map_err(DriveError::Observer)?;
                streamed.entry(item_id).or_default().push_str(&delta);
                pending.piece_of_text(&controls, &mut interrupts_in_flight);
            }
            Some(TurnNotification::ItemCompleted {
                thread_id: th,
                turn_id: t,
                item,
            }) if item.kind == "agentMessage" && ours.is(&th, &t) => {
                let shown = streamed.remove(&item.id).unwrap_or_default();
                let rest = item
                    .text
                    .as_deref()
                    .map_or("", |text| unshown(text, &shown));
                if !rest.is_empty() {
                    observe(TurnEvent::AgentText(rest)).map_err(DriveError::Observer)?;
                    if shown.is_empty() {
                        // A message without deltas is one piece of text.
                        pending.piece_of_text(&controls, &mut interrupts_in_flight);
                    }
                }
                observe(TurnEvent::AgentMessageBoundary).map_err(DriveError::Observer)?;
            }
            Some(
                TurnNotification::ItemStarted { item, .. }
                | TurnNotification::ItemCompleted { item, .. },
            ) if item.kind == "agentMessage" => {
                observe(TurnEvent::AgentMessageBoundary).map_err(DriveError::Observer)?;
            }
            // Codex refuses an interrupt until it reports the turn started.
            Some(TurnNotification::TurnStarted {
                thread_id: th,
                turn,
            }) if ours.is(&th, &turn.id) && pending.interrupt_after == Some(0) => {
                pending.interrupt_after = None;
                interrupts_in_flight += 1;
                controls.interrupt();
            }
            Some(TurnNotification::TurnCompleted {
                thread_id: th,
                turn,
            }) if ours.is(&th, &turn.id) => {
                observe(TurnEvent::TurnCompleted(&turn)).map_err(DriveError::Observer)?;
                break (turn, None);
            }
            _ => {}
        }
    };
    recorder.finish().await?;
    let (turn, given_up) = finished;
    let mut not_sent = Vec::new();
    if pending.steer.is_some() {
        not_sent.push(NotSent::Steer);
    }
    if pending.interrupt_after.is_some() {
        not_sent.push(NotSent::Interrupt);
    }
    for control in &not_sent {
        tracing::warn!(
            control = control.as_str(),
            "never sent: the turn ended first"
        );
    }
    Ok(TurnReport {
        thread_id,
        turn,
        given_up,
        not_sent,
    })
}

/// Masks the API key split across the deltas of one item: a [`StreamMask`] per method and
/// item, until the item completes.
struct DeltaMasks {
    key: Option<&'static str>,
    masks: HashMap<(String, String), StreamMask>,
}

impl DeltaMasks {
    fn new(key: Option<&'static str>) -> Self {
        DeltaMasks {
            key,
            masks: HashMap::new(),
        }
    }

    /// Masks `event`'s `delta` (held back: see the module docs); forgets an item's masks
    /// when it completes.
    fn apply(&mut self, event: &mut AppServerEvent) {
        let Some(key) = self.key else { return };
        let AppServerEvent::Notification(note) = event else {
            return;
        };
        if note.method == "item/completed" {
            if let Some(id) = note.params.pointer("/item/id").and_then(Value::as_str) {
                self.masks.retain(|(_, item), _| item != id);
            }
            return;
        }
        let Some(item) = note.params.get("itemId").and_then(Value::as_str) else {
            return;
        };
        let stream = (note.method.clone(), item.to_owned());
        let Some(Value::String(delta)) = note.params.get_mut("delta") else {
            return;
        };
        let mask = self
            .masks
            .entry(stream)
            .or_insert_with(|| StreamMask::new(Some(key.to_owned())));
        *delta = mask.push(delta);
    }
}

/// The steer and interrupt the request asked for, not sent yet.
struct Pending {
    steer: Option<String>,
    interrupt_after: Option<u64>,
    /// Pieces of our turn's agent text so far.
    pieces: u64,
}

impl Pending {
    /// One more piece of our turn's agent text: the steer goes at the first, the interrupt
    /// after `interrupt_after`.
    fn piece_of_text(&mut self, controls: &Controls, interrupts_in_flight: &mut usize) {
        self.pieces += 1;
        if let Some(text) = self.steer.take() {
            controls.steer(text);
        }
        if self.interrupt_after.is_some_and(|n| self.pieces >= n) {
            self.interrupt_after = None;
            *interrupts_in_flight += 1;
            controls.interrupt();
        }
    }
}

/// The part of a completed message's `text` that its deltas (`shown`) did not show: all of
/// it without deltas, the rest when they showed its start, nothing when they showed other
/// text (already on screen, it cannot be taken back).
fn unshown<'t>(text: &'t str, shown: &str) -> &'t str {
    match text.strip_prefix(shown) {
        Some(rest) => rest,
        None => {
            tracing::debug!("an agent message's text differs from its deltas; not shown again");
            ""
        }
    }
}

const TURN_COMPLETED: &str = "turn/completed";

/// Our turn's ids.
#[derive(Debug, Clone, Copy)]
struct Ours<'a> {
    thread_id: &'a str,
    turn_id: &'a str,
}

impl Ours<'_> {
    /// True when `thread_id` and `turn_id` are ours.
    fn is(&self, thread_id: &str, turn_id: &str) -> bool {
        thread_id == self.thread_id && turn_id == self.turn_id
    }

    /// True unless `note` (one that did not parse) names another thread or another turn.
    fn may_have_sent(&self, note: &Notification) -> bool {
        let names_other = |found: Option<&Value>, ours: &str| {
            found
                .and_then(Value::as_str)
                .is_some_and(|found| found != ours)
        };
        !names_other(note.params.get("threadId"), self.thread_id)
            && !names_other(note.params.pointer("/turn/id"), self.turn_id)
    }
}

/// The record of a turn the drive gave up on: interrupted, with `reason` in its error.
fn given_up_turn(turn_id: &str, reason: &GiveUp) -> Turn {
    Turn {
        id: turn_id.to_owned(),
        status: TurnStatus::Interrupted,
        items: Vec::new(),
        error: Some(json!({ "message": format!("gave up on the turn: {reason}") })),
        extra: Map::new(),
    }
}

/// Moves the events queued right now (at most `limit`, since the reader refills the
/// queue) into `early`, to be handled before the drive gives up.
fn drain_ready(events: &mut Events, early: &mut VecDeque<AppServerEvent>, limit: usize) {
    for _ in 0..limit {
        let Some(event) = events.try_recv() else {
            break;
        };
        early.push_back(event);
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
