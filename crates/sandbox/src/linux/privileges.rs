//! No capabilities, in any set, for this process and what it execs (root included).

use rustix::thread::{
    CapabilitySet, CapabilitySets, capabilities, clear_ambient_capability_set,
    configure_capability_in_ambient_set, remove_capability_from_bounding_set, set_capabilities,
    set_no_new_privs,
};

use super::apply_err;
use crate::SandboxError;

pub(crate) fn drop_all() -> Result<(), SandboxError> {
    set_no_new_privs(true)
        .map_err(std::io::Error::from)
        .map_err(apply_err("no_new_privs"))?;
    // Unknown to this kernel is fine; a known one that stays is not (checked below).
    let _ = clear_ambient_capability_set();
    for bit in 0..64 {
        if let Some(cap) = CapabilitySet::from_bits(1 << bit) {
            let _ = remove_capability_from_bounding_set(cap);
        }
    }
    set_capabilities(
        None,
        CapabilitySets {
            effective: CapabilitySet::empty(),
            permitted: CapabilitySet::empty(),
            inheritable: CapabilitySet::empty(),
        },
    )
    .map_err(std::io::Error::from)
    .map_err(apply_err("capabilities"))?;
    let left = rustix::thread::capabilities(None)
        .map_err(std::io::Error::from)
        .map_err(apply_err("capabilities"))?;
    if !left.permitted.is_empty() || !left.effective.is_empty() {
        return Err(SandboxError::Apply {
            step: "capabilities",
            reason: "some capabilities could not be dropped".into(),
        });
    }
    Ok(())
}

/// Keeps the right to mount (`CAP_SYS_ADMIN`, over the namespaces this process made, and
/// `CAP_SETPCAP` to empty the bounding set after) across the next exec, for a user other
/// than root: the first process of the sandbox's PID
/// namespace mounts its `/proc` before it drops everything, and an exec by a user other than
/// root clears the capabilities a new user namespace gave unless they are ambient. Root
/// keeps them anyway. Whether it could.
pub(crate) fn keep_mount_right_across_exec() -> bool {
    if rustix::process::getuid().is_root() {
        return true;
    }
    // Mounting, and emptying the bounding set afterwards (`drop_all`).
    let kept = [CapabilitySet::SYS_ADMIN, CapabilitySet::SETPCAP];
    let Ok(mut sets) = capabilities(None) else {
        return false;
    };
    for cap in kept {
        sets.inheritable |= cap;
    }
    set_capabilities(None, sets).is_ok()
        && kept
            .into_iter()
            .all(|cap| configure_capability_in_ambient_set(cap, true).is_ok())
}
