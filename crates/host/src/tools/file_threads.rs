//! The threads the file tools do their disk work on.
//!
//! Invariants:
//! - At most [`FILE_THREADS`] file operations run at once, process-wide; the others wait in
//!   one queue. The threads start with the first operation and last as long as the process.
//! - An operation whose caller has gone (a cancelled call) still runs to its end; its result
//!   is dropped, as with any blocking work.
//! - A panic in an operation fails that call alone; its thread goes on with the queue.
//! - An operation that never returns (a hung network mount) holds its thread for good. With
//!   every thread held, later file calls wait in the queue until their run is interrupted;
//!   tokio's pool would have started more threads instead. The file tools refuse what is
//!   known to block (a FIFO or a device is not read or written), so this takes a disk that
//!   stops answering.
//!
//! Why not tokio's blocking pool: under a thousand concurrent runs calling `list_dir`, the
//! process peaked at 95 threads, and still ~45 with a semaphore of 4 in front (a finished
//! call's next one often came before its thread was idle again, so the pool started
//! another). Each thread that touches the disk keeps its own allocator pages and its own
//! glibc arena (the directory buffer), about 13 MiB of the process's peak at a thousand
//! runs. A fixed set of threads, as the journal's readers have, keeps that flat.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, mpsc};

use tokio::sync::oneshot;

/// How many file operations run at once. A file tool's work is a few system calls on a
/// local disk; more threads than cores buy little, and each costs memory.
pub(crate) const FILE_THREADS: usize = 2;

type Job = Box<dyn FnOnce() + Send>;

/// Why a file operation did not return.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FileThreadError {
    /// No file thread is there to take it: none could be started, or all have stopped.
    #[error("file operations cannot run: {0}")]
    Unavailable(String),
    /// The operation panicked.
    #[error("the file operation did not finish")]
    Lost,
}

/// Runs `work` on a file thread, once one is free, and returns what it returns.
pub(crate) async fn run_on_file_thread<T, F>(work: F) -> Result<T, FileThreadError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let (tx, rx) = oneshot::channel();
    let job: Job = Box::new(move || {
        // The caller may have gone; its result is then dropped.
        let _ = tx.send(work());
    });
    queue()?
        .send(job)
        .map_err(|_| FileThreadError::Unavailable("the file threads have stopped".into()))?;
    rx.await.map_err(|_| FileThreadError::Lost)
}

/// The queue, with its threads started on first use.
fn queue() -> Result<&'static mpsc::Sender<Job>, FileThreadError> {
    static QUEUE: OnceLock<Result<mpsc::Sender<Job>, String>> = OnceLock::new();
    QUEUE
        .get_or_init(start)
        .as_ref()
        .map_err(|reason| FileThreadError::Unavailable(reason.clone()))
}

/// Starts the threads; fails only when not even one could be.
fn start() -> Result<mpsc::Sender<Job>, String> {
    let (tx, rx) = mpsc::channel::<Job>();
    let rx = Arc::new(Mutex::new(rx));
    let (mut started, mut failure) = (false, None);
    for _ in 0..FILE_THREADS {
        let rx = Arc::clone(&rx);
        match std::thread::Builder::new()
            .name("agent-host-files".into())
            .spawn(move || serve(&rx))
        {
            Ok(_) => started = true,
            Err(err) => failure = Some(err),
        }
    }
    match failure {
        Some(err) if !started => Err(format!("no thread could be started: {err}")),
        _ => Ok(tx),
    }
}

fn serve(queue: &Mutex<mpsc::Receiver<Job>>) {
    loop {
        let job = queue.lock().unwrap_or_else(PoisonError::into_inner).recv();
        match job {
            // A panic unwinds out of the job alone: its reply sender is dropped, so its
            // caller gets `Lost`, and this thread takes the next job.
            Ok(job) => {
                let _ = std::panic::catch_unwind(AssertUnwindSafe(job));
            }
            Err(mpsc::RecvError) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn returns_what_the_work_returns() {
        let got = run_on_file_thread(|| 6 * 7).await;
        assert_eq!(got, Ok(42));
    }

    #[tokio::test]
    async fn a_panic_fails_its_call_alone() {
        let lost = run_on_file_thread(|| -> u32 { panic!("boom") }).await;
        assert_eq!(lost, Err(FileThreadError::Lost));
        // Every thread still serves: more calls than threads, each one answered.
        for i in 0..(FILE_THREADS * 3) {
            assert_eq!(run_on_file_thread(move || i).await, Ok(i));
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_more_than_the_bound_run_at_once() {
        static RUNNING: AtomicUsize = AtomicUsize::new(0);
        static MOST: AtomicUsize = AtomicUsize::new(0);
        let calls = (0..FILE_THREADS * 8).map(|_| {
            run_on_file_thread(|| {
                let now = RUNNING.fetch_add(1, Ordering::SeqCst) + 1;
                MOST.fetch_max(now, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(5));
                RUNNING.fetch_sub(1, Ordering::SeqCst);
                std::thread::current().name().map(str::to_owned)
            })
        });
        let names = futures::future::join_all(calls).await;
        for name in names {
            assert_eq!(name, Ok(Some("agent-host-files".to_string())));
        }
        let most = MOST.load(Ordering::SeqCst);
        assert!((1..=FILE_THREADS).contains(&most), "{most} ran at once");
    }

    #[tokio::test]
    async fn a_cancelled_call_still_runs_to_its_end() {
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let call = run_on_file_thread(move || {
            std::thread::sleep(Duration::from_millis(20));
            let _ = done_tx.send(());
        });
        // Polled once (so queued), then dropped.
        let _ = tokio::time::timeout(Duration::from_millis(1), call).await;
        assert_eq!(done_rx.recv_timeout(Duration::from_secs(10)), Ok(()));
    }
}
