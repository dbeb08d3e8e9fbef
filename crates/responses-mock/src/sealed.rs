//! The emulator's compaction content: opaque to clients, and verifiable by any emulator
//! process, as the API verifies its own content across sessions (a run compacted by one
//! `--mock` process is resumed by another).
//!
//! Invariant: [`verifies`] accepts exactly what [`seal`] made (`cmp-mock-<id>-<check>`,
//! the check a keyed FNV-1a hash of the id). It guards against content a client mangled or
//! invented, not against forgery: the emulator is no security boundary.

/// Mixed into every check, so that a hash of the id alone does not verify.
const KEY: &[u8] = b"agentctl-emulator-compaction";

const PREFIX: &str = "cmp-mock-";

/// New compaction content.
pub(crate) fn seal() -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("{PREFIX}{id}-{:016x}", check(&id))
}

/// Whether `content` is what [`seal`] made, in this process or another.
pub(crate) fn verifies(content: &str) -> bool {
    let Some((id, tag)) = content
        .strip_prefix(PREFIX)
        .and_then(|rest| rest.rsplit_once('-'))
    else {
        return false;
    };
    u64::from_str_radix(tag, 16).is_ok_and(|tag| tag == check(id))
}

fn check(id: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in KEY.iter().chain(id.as_bytes()) {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_content_verifies_and_anything_else_does_not() {
        let content = seal();
        assert!(verifies(&content));
        assert_ne!(seal(), content);
        let (head, tag) = content.rsplit_once('-').unwrap_or_default();
        let flipped = format!(
            "{head}-{:016x}",
            u64::from_str_radix(tag, 16).unwrap_or(0) ^ 1
        );
        for other in [
            flipped.as_str(),
            "cmp-mock-0123",
            "cmp-mock-",
            "gAAAAABpM0Yj",
            "",
            &content[..content.len() - 1],
        ] {
            assert!(!verifies(other), "{other}");
        }
    }
}
