//! The host's own half of the sandbox: a process that starts commands marks itself
//! non-dumpable, so that even an unsandboxed command (`--sandbox off`, or an approved
//! escalation) of the same user cannot read its `/proc/<pid>/environ` (where the API key
//! is) or `mem`, nor attach to it. Sandboxed commands are kept out by Landlock already; root
//! passes this check (its `CAP_SYS_PTRACE`), which is why the sandbox does not rely on it.
//!
//! A command started from the host is dumpable again: `execve` resets the attribute.

/// Marks this process non-dumpable (Linux); elsewhere, does nothing. An error is returned
/// for the caller to report; nothing else depends on it.
pub fn hide_this_process() -> Result<(), std::io::Error> {
    #[cfg(target_os = "linux")]
    {
        rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
            .map_err(std::io::Error::from)
    }
    #[cfg(not(target_os = "linux"))]
    {
        Ok(())
    }
}
