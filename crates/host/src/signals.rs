//! Stopping long-running work (a follow, a server, a worker) when the user asks.
//!
//! Invariant: a signal only ends the *waiting*. Work that must finish its bookkeeping on a
//! stop (a worker giving back its runs) is told through a [`CancellationToken`] and winds
//! down itself; only work whose drop is harmless (printing a stream, serving requests) is
//! dropped at the signal.

use std::future::Future;

use agent_runtime::CancellationToken;

/// Runs `work` until it finishes or Ctrl-C (SIGINT) or SIGTERM arrives (what `kill`, a
/// service manager or a container runtime sends to stop it): `Ok(Some(output))` when it
/// finished, `Ok(None)` when a signal came first, `Err` when a signal handler cannot be
/// installed.
///
/// # Cancel safety
/// Cancel-safe when `work` is: at the signal (or when this future is dropped) `work` is
/// dropped where it stands, so use it only for work that leaves nothing half-done.
pub async fn until_signal<F: Future>(work: F) -> std::io::Result<Option<F::Output>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    tokio::select! {
        output = work => Ok(Some(output)),
        signal = tokio::signal::ctrl_c() => signal.map(|()| None),
        _ = term.recv() => Ok(None),
    }
}

/// Cancels `stop` at the first SIGINT or SIGTERM, and returns a future that resolves at the
/// second one (the caller decides what a second signal means, typically exiting at once).
///
/// The handlers are installed before this returns, so a signal that arrives right after is
/// not lost. The returned future must be polled (spawned) for `stop` to be cancelled.
///
/// # Cancel safety
/// Dropping the returned future uninstalls nothing and cancels nothing; later signals are
/// then ignored by this helper.
pub fn stop_on_signals(
    stop: CancellationToken,
) -> std::io::Result<impl Future<Output = ()> + Send + 'static> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        stop.cancel();
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}
