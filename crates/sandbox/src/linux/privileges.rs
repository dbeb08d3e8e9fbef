//! No capabilities, in any set, for this process and what it execs (root included).

use rustix::thread::{
    CapabilitySet, CapabilitySets, clear_ambient_capability_set,
    remove_capability_from_bounding_set, set_capabilities, set_no_new_privs,
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
