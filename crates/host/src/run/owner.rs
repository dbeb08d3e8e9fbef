//! Which process drives a run, and whether it still lives.
//!
//! A driving host records itself (`run.created` / `run.resumed`: host name, pid, and the
//! process's start time from `/proc`, so a recycled pid is not mistaken for it). Another
//! process on the same machine can then tell a live driver from a dead one; a driver on
//! another machine cannot be checked from here and counts as live (leases across machines
//! are the worker pool's job).

use serde::{Deserialize, Serialize};

/// A driving process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    /// The machine's host name.
    pub host: String,
    /// The process id.
    pub pid: u32,
    /// Start time of the process in clock ticks since boot (`/proc/PID/stat` field 22).
    #[serde(default)]
    pub started: Option<u64>,
}

impl Owner {
    /// This process.
    pub fn current() -> Owner {
        let pid = std::process::id();
        Owner {
            host: hostname(),
            pid,
            started: start_time(pid),
        }
    }

    /// The person behind this process, as decisions and interrupts record it:
    /// `$USER@host` (`unknown@host` without `USER`).
    pub fn user_at_host() -> String {
        let user = std::env::var("USER")
            .ok()
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| "unknown".into());
        format!("{user}@{}", hostname())
    }

    /// This machine's host name, as owners record it.
    pub fn this_host() -> String {
        hostname()
    }

    /// Whether the process is (as far as this machine can tell) still running.
    pub fn is_alive(&self) -> bool {
        if self.host != hostname() {
            return true;
        }
        match start_time(self.pid) {
            None => false,
            Some(now) => self.started.is_none_or(|then| then == now),
        }
    }
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {} on {}", self.pid, self.host)
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count after it.
    let after = &stat[stat.rfind(')')? + 1..];
    let state = after.split_whitespace().next()?;
    if state == "Z" || state == "X" {
        return None;
    }
    after.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_dead_one_is_not() {
        let me = Owner::current();
        assert!(me.started.is_some());
        assert!(me.is_alive());
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let gone = Owner { pid, ..me.clone() };
        assert!(!gone.is_alive());
        let recycled = Owner {
            started: me.started.map(|s| s + 1),
            ..me
        };
        assert!(!recycled.is_alive());
    }
}
