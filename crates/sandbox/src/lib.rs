//! The OS sandbox of the commands a model runs.
//!
//! A sandboxed command is started as `<launcher> __sandbox-exec POLICY_JSON -- PROGRAM ARGS`
//! ([`entry_args`]), the launcher being the small `agentctl-sandbox` binary or `agentctl`
//! itself: that entry point ([`run_sandboxed`]) restricts its own process, then runs the
//! program, which inherits every restriction and cannot lift any of them, and waits for it.
//!
//! What a restricted process gets (see [`Policy`] for the inputs):
//! - files (Landlock, and mounts in a private namespace that cover the hidden paths): reads
//!   everywhere except [`Policy::deny_read`]; writes only in the
//!   workspace (`workspace-write`), its private temp dir, the writable roots and a few
//!   devices; inside the workspace, `.git` and `agentctl.toml` are bind-mounted read-only in
//!   a private mount namespace, so a write there fails even where Landlock allows it, and
//!   one the command creates where there was none is moved aside after it (`protected`);
//! - file metadata: every mount but the writable paths (and `/proc`) is read-only in that
//!   namespace, so no mode, owner, time or extended attribute changes outside them; no
//!   setuid or setgid bit anywhere (seccomp);
//! - network (unless [`Policy::network`]): no TCP bind or connect (Landlock) and no socket of
//!   any family but `AF_UNIX` (seccomp), so UDP, raw and netlink sockets are refused too;
//!   and none of the host's Unix sockets: those bound by path are covered (all but the
//!   command's own beneath the paths the policy names, and the name services'), abstract
//!   ones are out of Landlock's scope (with the network on, they are reachable like every
//!   other socket);
//! - other processes: no signals to processes outside the sandbox and no ptrace of them
//!   (Landlock), so neither `/proc/<pid>/environ` nor `/proc/<pid>/mem` of the host; no
//!   limits or priorities set on them, nor on its process group or user (seccomp), nor
//!   their scheduling where it has no PID namespace; a PID namespace of its own, so that
//!   nothing the command started outlives it; its own SysV IPC namespace; no kernel
//!   keyrings and no input pushed into a terminal (seccomp);
//! - what it inherits: no descriptor but stdin, stdout and stderr;
//! - `no_new_privs`, an empty capability bounding set and no capabilities, so all of the
//!   above holds for root.
//!
//! Without a mount namespace (a user other than root where user namespaces are off)
//! Landlock hides alone, which it cannot do beneath a path it grants: a policy with a hidden
//! path beneath the workspace, a writable root or the temp dir, or a `.git` to protect, is
//! then [`SandboxError::Unsupported`], naming the path.
//!
//! Only Linux can give this; elsewhere every sandboxed mode is [`SandboxError::Unsupported`].

mod entry;
mod error;
mod hide;
#[cfg(target_os = "linux")]
mod linux;
mod policy;
pub mod process;
pub mod protected;
mod read_rules;

pub use entry::{
    ENTRY, ENTRY_BINARY, EXIT_CANNOT_EXEC, EXIT_NOT_SANDBOXED, INIT, entry_args, entry_main,
    exit_byte, init_main, run_sandboxed,
};
pub use error::SandboxError;
pub use hide::hide_this_process;
pub use policy::{Mode, Policy, default_deny_read};
pub use read_rules::readable_roots;
