//! Codex turns through `codex app-server`: the turn driver, the journal recorder and the
//! emulator as an offline model provider.
//!
//! - [`driver`]: [`drive_turn`] runs one whole turn (handshake, thread, turn, events until
//!   the turn completes, optional steer and interrupt) and reports each step to an observer;
//!   its steer and interrupt calls run on tasks of their own (`controls`).
//! - [`recorder`]: [`Recorder`] journals every server event under the Codex thread id, in
//!   batches on a task of its own, dropping nothing.
//! - `mock_provider` (feature `mock`): `MockProvider` runs the Responses emulator in-process
//!   and writes a temporary `CODEX_HOME` that makes it Codex's model provider.
//! - [`session`]: [`run_codex_turn`] puts the three together for one whole turn, from
//!   starting `codex app-server` to closing it.
//!
//! Invariant shared by all three: the journal is written only through the recorder, and
//! only events Codex actually sent (plus the replies we sent to its requests) are recorded.

mod controls;
pub mod driver;
#[cfg(test)]
mod driver_tests;
#[cfg(feature = "mock")]
pub mod mock_provider;
pub mod recorder;
pub mod session;

pub use driver::{
    DEFAULT_QUIET_NOTICE, DriveError, GiveUp, NotSent, TurnEvent, TurnReport, TurnRequest,
    drive_turn, while_buffering,
};
#[cfg(feature = "mock")]
pub use mock_provider::{MockProvider, MockProviderError};
pub use recorder::{Recorder, RecorderError, clean_event, journal_entry, reply_json};
pub use session::{AppServerLaunch, CodexTurn, CodexTurnError, run_codex_turn};
