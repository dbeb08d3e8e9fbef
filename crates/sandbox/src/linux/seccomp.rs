//! The system calls a sandboxed command may not make, or not with some arguments. Each is
//! refused with `EPERM`, except `openat2` (see below):
//! - without the network: a socket of any family but `AF_UNIX`;
//! - io_uring: its operations would bypass this filter (it could open a socket);
//! - the kernel keyrings: they are not namespaced, so a key the host keeps is readable from
//!   any process of its user;
//! - pushing input into a terminal (`TIOCSTI`, `TIOCLINUX`): on a terminal the command
//!   inherited, it would become the user's next command line after the sandbox exits;
//! - resource limits, priorities and I/O priorities of any process but the caller
//!   (`prlimit64` with a pid other than 0; `setpriority` and `ioprio_set` unless they name
//!   the calling process, `PRIO_PROCESS` or `IOPRIO_WHO_PROCESS` with 0, and not its process
//!   group or its user's processes): between processes of one user the kernel allows them,
//!   and Landlock scopes only signals and ptrace, so a command could otherwise kill the host
//!   with a CPU limit, or renice it, the user's shell (the terminal's process group a
//!   command run by hand stays in) or every process of the user;
//! - when the command has no PID namespace of its own: the scheduling of any process but
//!   the caller (`sched_setscheduler`, `sched_setparam`, `sched_setattr`,
//!   `sched_setaffinity` with a pid other than 0), since the host's pid and every other
//!   process of the user are then within reach (a thread pinned by its tid is refused too);
//!   in a PID namespace no other process has a pid the command can name;
//! - setuid and setgid bits, by `chmod` or on a file being created: a setuid-root program
//!   left in the workspace outlives the sandbox; the filter reads the mode argument of
//!   `chmod`, `fchmod`, `fchmodat(2)`, `open`, `openat`, `creat`, `mknod(at)`;
//! - `openat2`, whose mode sits in a struct the filter cannot read: refused with `ENOSYS`,
//!   as on a kernel that lacks it, so that callers fall back to `openat`;
//! - SysV IPC (`shmget`, `semget`, `msgget`) when the command has no IPC namespace of its
//!   own, where a segment would outlive it and be shared with the host;
//! - for a command that dies with its entry point (`Policy::dies_with_entry`), a
//!   parent-death signal other than `SIGKILL` (`prctl(PR_SET_PDEATHSIG)`): clearing the
//!   one its first process was given would let it outlive the entry point;
//! - on x86_64, every x32 system call (numbers with bit 30 set), refused with `ENOSYS` as
//!   on a kernel without x32: the x32 ABI shares x86_64's architecture token with other
//!   numbers, which the rules above do not name.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use crate::SandboxError;

/// `fchmodat2` and `openat2`: numbered alike on every architecture (new calls since 5.1 are).
const SYS_FCHMODAT2: i64 = 452;
const SYS_OPENAT2: i64 = 437;

/// `ioprio_set`'s `which` for one process (`IOPRIO_WHO_PGRP` is 2, `IOPRIO_WHO_USER` 3).
const IOPRIO_WHO_PROCESS: u64 = 1;

/// The rules of one filter: a call is refused when any of its rules holds (a rule with no
/// condition always does).
type Rules = BTreeMap<i64, Vec<SeccompRule>>;

/// What the filter must refuse besides what it always does.
pub(crate) struct Refuse {
    /// Sockets other than `AF_UNIX` (the network is off).
    pub sockets: bool,
    /// SysV IPC (no IPC namespace of its own).
    pub sysv_ipc: bool,
    /// The scheduling of processes other than the caller (no PID namespace of its own).
    pub other_scheduling: bool,
    /// A parent-death signal other than `SIGKILL`.
    pub other_death_signal: bool,
}

pub(crate) fn restrict(refuse: &Refuse) -> Result<(), SandboxError> {
    let arch = target_arch().ok_or_else(|| {
        SandboxError::Unsupported(format!(
            "the sandbox has no seccomp filter for {}",
            std::env::consts::ARCH
        ))
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
    if refuse.other_death_signal {
        rules.insert(
            libc::SYS_prctl,
            vec![rule(&[
                (0, SeccompCmpOp::Eq, libc::PR_SET_PDEATHSIG as u64),
                (1, SeccompCmpOp::Ne, libc::SIGKILL as u64),
            ])?],
        );
    }
    rules.insert(libc::SYS_prlimit64, other_process(0)?);
    // `which` names a process, not a group or a user, and `who` is the caller.
    let not_the_caller = |which: u64| -> Result<Vec<SeccompRule>, String> {
        Ok(vec![
            rule(&[(0, SeccompCmpOp::Ne, which)])?,
            rule(&[(1, SeccompCmpOp::Ne, 0)])?,
        ])
    };
    rules.insert(
        libc::SYS_setpriority,
        not_the_caller(libc::PRIO_PROCESS as u64)?,
    );
    rules.insert(libc::SYS_ioprio_set, not_the_caller(IOPRIO_WHO_PROCESS)?);
    if refuse.other_scheduling {
        for call in [
            libc::SYS_sched_setscheduler,
            libc::SYS_sched_setparam,
            libc::SYS_sched_setattr,
            libc::SYS_sched_setaffinity,
        ] {
            rules.insert(call, other_process(0)?);
        }
    }
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
    let program = if arch == TargetArch::x86_64 {
        [no_x32(), program].concat()
    } else {
        program
    };
    seccompiler::apply_filter(&program).map_err(|e| seccomp_err(e.to_string()))
}

/// Bit 30 of an x86_64 system call number: the x32 ABI.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// Instructions put before a filter on x86_64: any call numbered at or above
/// [`X32_SYSCALL_BIT`] gets `ENOSYS`; the filter sees only the others. (The filter's own
/// first check, of the architecture, passes x32 calls: they carry x86_64's token.) BPF
/// jumps are relative, so the filter after them runs unchanged.
fn no_x32() -> BpfProgram {
    const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
    let insn = |code, jt, jf, k| seccompiler::sock_filter { code, jt, jf, k };
    vec![
        // `seccomp_data.nr`, at offset 0.
        insn(LD_W_ABS, 0, 0, 0),
        insn(JGE_K, 0, 1, X32_SYSCALL_BIT),
        insn(RET_K, 0, 0, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
    ]
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The x32 check: the call number is loaded, compared with bit 30, and a number at or
    /// above it returns `ENOSYS` while any other jumps over that return into the filter.
    #[test]
    fn x32_calls_get_enosys_before_the_filter() {
        let prefix = no_x32();
        assert_eq!(prefix.len(), 3);
        assert_eq!((prefix[0].code, prefix[0].k), (0x20, 0));
        assert_eq!(
            (prefix[1].code, prefix[1].jt, prefix[1].jf, prefix[1].k),
            (0x35, 0, 1, 0x4000_0000)
        );
        assert_eq!(prefix[2].code, 0x06);
        assert_eq!(prefix[2].k, 0x0005_0000 | 38);
    }
}
