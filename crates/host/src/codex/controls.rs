//! Steer and interrupt calls for one turn, each on a task of its own, so that the turn
//! driver keeps reading the event queue while a call waits for its answer.
//!
//! Invariant: every call sent through [`Controls`] reports exactly one [`Control`] on the
//! channel [`Controls::new`] returns, unless the driver stopped listening first.

use agent_appserver::{AppServerClient, AppServerError, UserInput};
use tokio::sync::mpsc;

/// The result of a steer or interrupt call.
#[derive(Debug)]
pub(crate) enum Control {
    /// `turn/steer` answered: the turn the steer went into, or why it failed.
    Steered(Result<String, AppServerError>),
    /// `turn/interrupt` answered, failed or timed out.
    Interrupted(Result<(), AppServerError>),
}

/// Sends steer and interrupt calls for one turn on tasks of their own.
#[derive(Debug)]
pub(crate) struct Controls {
    client: AppServerClient,
    thread_id: String,
    turn_id: String,
    tx: mpsc::Sender<Control>,
}

impl Controls {
    /// Controls for `turn_id` of `thread_id`, and the channel their results arrive on.
    pub(crate) fn new(
        client: &AppServerClient,
        thread_id: &str,
        turn_id: &str,
    ) -> (Self, mpsc::Receiver<Control>) {
        let (tx, rx) = mpsc::channel(4);
        let controls = Controls {
            client: client.clone(),
            thread_id: thread_id.to_owned(),
            turn_id: turn_id.to_owned(),
            tx,
        };
        (controls, rx)
    }

    /// Sends `turn/steer` with `text`.
    pub(crate) fn steer(&self, text: String) {
        let (client, tx, thread_id, turn_id) = self.parts();
        tokio::spawn(async move {
            let result = client
                .turn_steer(&thread_id, &turn_id, vec![UserInput::text(text)])
                .await
                .map(|r| r.turn_id);
            // The loop may have ended first; then nobody needs the answer.
            let _ = tx.send(Control::Steered(result)).await;
        });
    }

    /// Sends `turn/interrupt`.
    pub(crate) fn interrupt(&self) {
        let (client, tx, thread_id, turn_id) = self.parts();
        tokio::spawn(async move {
            let result = client.turn_interrupt(&thread_id, &turn_id).await;
            let _ = tx.send(Control::Interrupted(result)).await;
        });
    }

    fn parts(&self) -> (AppServerClient, mpsc::Sender<Control>, String, String) {
        (
            self.client.clone(),
            self.tx.clone(),
            self.thread_id.clone(),
            self.turn_id.clone(),
        )
    }
}
