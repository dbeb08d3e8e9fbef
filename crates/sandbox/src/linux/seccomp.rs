//! No socket of any family but `AF_UNIX`, and no io_uring (which could open one).

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use crate::SandboxError;

pub(crate) fn deny_sockets() -> Result<(), SandboxError> {
    let err = |reason: String| SandboxError::Apply {
        step: "seccomp",
        reason,
    };
    let arch = target_arch().ok_or_else(|| {
        SandboxError::Unsupported(format!("no seccomp filter for {}", std::env::consts::ARCH))
    })?;
    let not_unix = || -> Result<Vec<SeccompRule>, String> {
        let cond = SeccompCondition::new(
            0,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Ne,
            libc::AF_UNIX as u64,
        )
        .map_err(|e| e.to_string())?;
        Ok(vec![
            SeccompRule::new(vec![cond]).map_err(|e| e.to_string())?,
        ])
    };
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    rules.insert(libc::SYS_socket, not_unix().map_err(err)?);
    rules.insert(libc::SYS_socketpair, not_unix().map_err(err)?);
    rules.insert(libc::SYS_io_uring_setup, Vec::new());
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| err(e.to_string()))?;
    let program: BpfProgram = filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| err(e.to_string()))?;
    seccompiler::apply_filter(&program).map_err(|e| err(e.to_string()))
}

fn target_arch() -> Option<TargetArch> {
    match std::env::consts::ARCH {
        "x86_64" => Some(TargetArch::x86_64),
        "aarch64" => Some(TargetArch::aarch64),
        "riscv64" => Some(TargetArch::riscv64),
        _ => None,
    }
}
