//! The system calls a sandboxed command may not make, or not with some arguments. Each is
//! refused with `EPERM`, except `openat2` (see below):
//! - without the network: a socket of any family but `AF_UNIX`;
//! - io_uring: its operations would bypass this filter (it could open a socket);
//! - the kernel keyrings: they are not namespaced, so a key the host keeps is readable from
//!   any process of its user;
//! - pushing input into a terminal (`TIOCSTI`, `TIOCLINUX`): on a terminal the command
//!   inherited, it would become the user's next command line after the sandbox exits;
//! - resource limits, priorities and I/O priorities of another process (`prlimit64`,
//!   `setpriority`, `ioprio_set` naming a process other than the caller): between processes
//!   of one user the kernel allows them, and Landlock scopes only signals and ptrace, so a
//!   command could otherwise kill the host with a CPU limit;
//! - setuid and setgid bits, by `chmod` or on a file being created: a setuid-root program
//!   left in the workspace outlives the sandbox; the filter reads the mode argument of
//!   `chmod`, `fchmod`, `fchmodat(2)`, `open`, `openat`, `creat`, `mknod(at)`;
//! - `openat2`, whose mode sits in a struct the filter cannot read: refused with `ENOSYS`,
//!   as on a kernel that lacks it, so that callers fall back to `openat`;
//! - SysV IPC (`shmget`, `semget`, `msgget`) when the command has no IPC namespace of its
//!   own, where a segment would outlive it and be shared with the host.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use crate::SandboxError;

/// `fchmodat2` and `openat2`: numbered alike on every architecture (new calls since 5.1 are).
const SYS_FCHMODAT2: i64 = 452;
const SYS_OPENAT2: i64 = 437;

/// The rules of one filter: a call is refused when any of its rules holds (a rule with no
/// condition always does).
type Rules = BTreeMap<i64, Vec<SeccompRule>>;

/// What the filter must refuse besides what it always does.
pub(crate) struct Refuse {
    /// Sockets other than `AF_UNIX` (the network is off).
    pub sockets: bool,
    /// SysV IPC (no IPC namespace of its own).
    pub sysv_ipc: bool,
}

pub(crate) fn restrict(refuse: &Refuse) -> Result<(), SandboxError> {
    let arch = target_arch().ok_or_else(|| {
        SandboxError::Unsupported(format!("no seccomp filter for {}", std::env::consts::ARCH))
    })?;
    let rules = eperm_rules(refuse).map_err(seccomp_err)?;
    install(rules, libc::EPERM, arch)?;
    let unknown = BTreeMap::from([(SYS_OPENAT2, Vec::new())]);
    install(unknown, libc::ENOSYS, arch)
}

fn eperm_rules(refuse: &Refuse) -> Result<Rules, String> {
    let mut rules = Rules::new();
    let always = Vec::new;
    rules.insert(libc::SYS_io_uring_setup, always());
    for call in [libc::SYS_keyctl, libc::SYS_add_key, libc::SYS_request_key] {
        rules.insert(call, always());
    }
    if refuse.sockets {
        let not_unix = || rule(&[(0, SeccompCmpOp::Ne, libc::AF_UNIX as u64)]);
        rules.insert(libc::SYS_socket, vec![not_unix()?]);
        rules.insert(libc::SYS_socketpair, vec![not_unix()?]);
    }
    if refuse.sysv_ipc {
        for call in [libc::SYS_shmget, libc::SYS_semget, libc::SYS_msgget] {
            rules.insert(call, always());
        }
    }
    #[allow(clippy::unnecessary_cast)] // `c_ulong` with glibc, `c_int` with musl
    let requests = [libc::TIOCSTI as u64, libc::TIOCLINUX as u64];
    let ioctls = requests
        .into_iter()
        .map(|request| rule(&[(1, SeccompCmpOp::Eq, request)]))
        .collect::<Result<_, _>>()?;
    rules.insert(libc::SYS_ioctl, ioctls);
    // The process argument: 0 is the caller itself.
    let other_process = |arg: u8| -> Result<Vec<SeccompRule>, String> {
        Ok(vec![rule(&[(arg, SeccompCmpOp::Ne, 0)])?])
    };
    rules.insert(libc::SYS_prlimit64, other_process(0)?);
    rules.insert(libc::SYS_setpriority, other_process(1)?);
    rules.insert(libc::SYS_ioprio_set, other_process(1)?);
    for (call, mode_arg) in mode_arguments() {
        let bits = [libc::S_ISUID, libc::S_ISGID]
            .into_iter()
            .map(|bit| {
                let bit = u64::from(bit);
                rule(&[(mode_arg, SeccompCmpOp::MaskedEq(bit), bit)])
            })
            .collect::<Result<_, _>>()?;
        rules.insert(call, bits);
    }
    Ok(rules)
}

/// The calls that set a file's mode, with the index of their mode argument.
fn mode_arguments() -> Vec<(i64, u8)> {
    let mut calls = vec![
        (libc::SYS_fchmod, 1),
        (libc::SYS_fchmodat, 2),
        (SYS_FCHMODAT2, 2),
        (libc::SYS_openat, 3),
        (libc::SYS_mknodat, 2),
    ];
    #[cfg(target_arch = "x86_64")]
    calls.extend([
        (libc::SYS_chmod, 1),
        (libc::SYS_open, 2),
        (libc::SYS_creat, 1),
        (libc::SYS_mknod, 1),
    ]);
    calls
}

/// A rule holding when every `(argument, op, value)` does; arguments are compared as the
/// 32-bit values the kernel reads them as (a file mode, a request, a process id).
fn rule(conditions: &[(u8, SeccompCmpOp, u64)]) -> Result<SeccompRule, String> {
    let conditions = conditions
        .iter()
        .map(|(arg, op, value)| {
            SeccompCondition::new(*arg, SeccompCmpArgLen::Dword, op.clone(), *value)
                .map_err(|e| e.to_string())
        })
        .collect::<Result<Vec<_>, _>>()?;
    SeccompRule::new(conditions).map_err(|e| e.to_string())
}

fn install(rules: Rules, errno: i32, arch: TargetArch) -> Result<(), SandboxError> {
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno as u32),
        arch,
    )
    .map_err(|e| seccomp_err(e.to_string()))?;
    let program: BpfProgram = filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| seccomp_err(e.to_string()))?;
    seccompiler::apply_filter(&program).map_err(|e| seccomp_err(e.to_string()))
}

fn seccomp_err(reason: String) -> SandboxError {
    SandboxError::Apply {
        step: "seccomp",
        reason,
    }
}

fn target_arch() -> Option<TargetArch> {
    match std::env::consts::ARCH {
        "x86_64" => Some(TargetArch::x86_64),
        "aarch64" => Some(TargetArch::aarch64),
        "riscv64" => Some(TargetArch::riscv64),
        _ => None,
    }
}
