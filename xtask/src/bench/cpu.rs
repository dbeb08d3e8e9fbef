//! Where a measurement's CPU time went, from `/proc`: the machine's busy share and the
//! CPU time of named process groups (the workers, the PostgreSQL server). A coarse profile,
//! enough to tell whether a pool is bound by this machine's cores and who spends them.

use std::collections::HashMap;

/// Clock ticks per second of `/proc` times (`USER_HZ`, 100 on every Linux this runs on).
const TICKS_PER_S: f64 = 100.0;

/// A reading taken before a measurement.
pub struct CpuMark {
    busy: u64,
    total: u64,
    postgres: HashMap<u32, u64>,
}

/// What a measurement spent between its mark and its end.
#[derive(Debug, Default, Clone, Copy)]
pub struct CpuUse {
    /// Share of all cores' time that was busy (1.0 = every core busy throughout).
    pub busy: f64,
    /// CPU seconds of all cores that were busy.
    pub busy_s: f64,
    /// CPU seconds of the listed processes (the workers).
    pub processes_s: f64,
    /// CPU seconds of `postgres` processes.
    pub postgres_s: f64,
}

impl CpuMark {
    pub fn now() -> CpuMark {
        let (busy, total) = machine();
        CpuMark {
            busy,
            total,
            postgres: postgres(),
        }
    }

    /// The use since this mark; `pids` are processes started after it (their whole CPU
    /// time counts), read before they exit.
    pub fn since(&self, pids: &[u32]) -> CpuUse {
        let (busy, total) = machine();
        let (busy, total) = (
            busy.saturating_sub(self.busy),
            total.saturating_sub(self.total),
        );
        let postgres_ticks: u64 = postgres()
            .into_iter()
            .map(|(pid, t)| t.saturating_sub(self.postgres.get(&pid).copied().unwrap_or(0)))
            .sum();
        let process_ticks: u64 = pids.iter().filter_map(|&pid| process_ticks(pid)).sum();
        CpuUse {
            busy: if total == 0 {
                0.0
            } else {
                busy as f64 / total as f64
            },
            busy_s: busy as f64 / TICKS_PER_S,
            processes_s: process_ticks as f64 / TICKS_PER_S,
            postgres_s: postgres_ticks as f64 / TICKS_PER_S,
        }
    }
}

/// (busy, total) ticks of all cores, from the first line of `/proc/stat`.
fn machine() -> (u64, u64) {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
        return (0, 0);
    };
    let Some(line) = stat.lines().next() else {
        return (0, 0);
    };
    let ticks: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    let total: u64 = ticks.iter().sum();
    // idle and iowait
    let idle = ticks.get(3).copied().unwrap_or(0) + ticks.get(4).copied().unwrap_or(0);
    (total.saturating_sub(idle), total)
}

/// user + system ticks of `pid` (fields 14 and 15 of `/proc/PID/stat`, counted after the
/// command name, which may hold spaces).
fn process_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): utime is field 14, stime 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Ticks of every live `postgres` process, by pid.
fn postgres() -> HashMap<u32, u64> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if comm.trim() == "postgres"
            && let Some(ticks) = process_ticks(pid)
        {
            out.insert(pid, ticks);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_spends_what_it_burns() {
        let mark = CpuMark::now();
        let pid = std::process::id();
        let before = process_ticks(pid).unwrap();
        // Spin until this process has been charged 100 ms of CPU (ten ticks): on a loaded
        // machine 300 ms of wall time gave it less than that. The deadline only bounds a
        // reader that never sees the ticks rise, which is the failure this test looks for.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let mut x = 0u64;
        while process_ticks(pid).unwrap() < before + 10 && std::time::Instant::now() < deadline {
            for _ in 0..100_000 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
        }
        std::hint::black_box(x);
        let used = mark.since(&[]);
        assert!(
            process_ticks(pid).unwrap() >= before + 10,
            "30 s of spinning and fewer than 10 ticks charged"
        );
        assert!(used.busy > 0.0 && used.busy <= 1.0, "{used:?}");
        assert!(used.busy_s >= 0.1, "{used:?}");
    }
}
