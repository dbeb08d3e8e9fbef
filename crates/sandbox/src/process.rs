//! Processes as the host's `/proc` shows them: what the entry point and the host check
//! before they act on a sandboxed command's processes.

/// Whether process `pid` exists and has not exited (a zombie has).
pub fn alive(pid: u32) -> bool {
    // The state is the first field after the command name, which ends at the last `)`.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| !matches!(state, "Z" | "X"))
    })
}

/// When process `pid` started (clock ticks after boot): with its pid, what tells it from a
/// later process given the same pid once it was reaped.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Field 22; the fields after the command name start at field 3.
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// The children of process `pid` (of each of its threads), as of now.
pub fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .filter_map(Result::ok)
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|c| c.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_is_listed_while_it_lives_and_not_alive_once_it_exited() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let me = std::process::id();
        assert!(alive(me));
        assert!(alive(child.id()));
        let started = start_time(child.id()).unwrap();
        assert!(started >= start_time(me).unwrap());
        assert!(children(me).contains(&child.id()));
        child.kill().unwrap();
        // Exited but not yet reaped: a zombie, not alive.
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(!alive(child.id()));
        child.wait().unwrap();
        assert!(!alive(child.id()));
        assert!(!children(me).contains(&child.id()));
    }
}
