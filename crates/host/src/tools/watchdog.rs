//! The watchdog that the shell's and MCP servers' bash wrappers start before their `exec`,
//! as text to splice into them with `concat!`.
//!
//! Invariants:
//! - The watchdog holds none of the command's pipes, and stays outside any sandbox.
//! - Once process `$1` (the host) is gone, it kills the wrapper's children (a sandboxed
//!   command's entry point's command, the first process of its PID namespace, and with it
//!   the namespace), runs what the wrapper asks (moving aside protected paths), and then
//!   kills its whole process group. A command therefore outlives neither the host's normal
//!   end nor its `kill -9`.
//! - It notices the host's end within about 50 ms (GNU `tail --pid` checks that often; a
//!   `tail` without `--pid`, busybox's, fails at once and a one-second `kill -0` loop takes
//!   over), so the first copy of a call is gone before a `resume` can record it interrupted
//!   and a human approve running it again (a one-second poll let the two overlap).

/// The watchdog, running the bash text `$after` between the two kills.
macro_rules! watchdog {
    ($after:expr) => {
        concat!(
            "( { tail -s 0.05 --pid=\"$1\" -f /dev/null || while kill -0 \"$1\" 2>/dev/null; do sleep 1; done; }; \
             for c in $(cat /proc/$$/task/*/children); do [ \"$c\" = \"$BASHPID\" ] || kill -KILL \"$c\"; done; ",
            $after,
            " kill -KILL 0 ) </dev/null >/dev/null 2>&1 & "
        )
    };
}

/// Bash text for a watchdog's `$after`: gives the wrapper's program (`$$` after its `exec`,
/// a sandbox's entry point, which moves them aside itself once its command is killed) up
/// to a second to end (a zombie has ended: with the host gone, nobody may reap it soon;
/// the state is the third field of `stat` when the program's name holds no space, as the
/// entry point's does not; another name reads as alive for that second), then moves aside each of the protected paths `$paths` (a bash word
/// list, the ones that did not exist before the command) that exists, as the host would
/// have (`agent_sandbox::protected`): to `<path>.sandbox-refused[-N]`, never over anything.
macro_rules! move_aside {
    ($paths:expr) => {
        concat!(
            "i=0; while [ $i -lt 10 ] && read -r _ _ st _ </proc/$$/stat && [ \"$st\" != Z ]; do sleep 0.1; i=$((i+1)); done; \
             for p in ",
            $paths,
            "; do if [ -e \"$p\" ] || [ -L \"$p\" ]; then \
             t=\"$p.sandbox-refused\"; n=1; \
             while { [ -e \"$t\" ] || [ -L \"$t\" ]; } && [ $n -lt 1000 ]; do n=$((n+1)); t=\"$p.sandbox-refused-$n\"; done; \
             mv -n -T -- \"$p\" \"$t\"; fi; done;"
        )
    };
}

pub(crate) use {move_aside, watchdog};
