//! The emulator's compaction content: opaque to clients, and verifiable by any emulator
//! process, as the API verifies its own content across sessions (a run compacted by one
//! `--mock` process is resumed by another).
//!
//! Invariant: [`verifies`] accepts exactly what [`seal`] made (`cmp-mock-<id>[.<outputs>]-<check>`,
//! the check a keyed FNV-1a hash of what comes before it). It guards against content a
//! client mangled or invented, not against forgery: the emulator is no security boundary.
//! `<outputs>` is how many tool outputs the compaction stands for (content sealed before it
//! was recorded has none and stands for none).

/// Mixed into every check, so that a hash of the id alone does not verify.
const KEY: &[u8] = b"agentctl-emulator-compaction";

const PREFIX: &str = "cmp-mock-";

/// New compaction content, standing for `outputs` tool outputs.
pub(crate) fn seal(outputs: usize) -> String {
    let id = format!("{}.{outputs}", uuid::Uuid::new_v4().simple());
    format!("{PREFIX}{id}-{:016x}", check(&id))
}

/// Whether `content` is what [`seal`] made, in this process or another.
pub(crate) fn verifies(content: &str) -> bool {
    sealed_id(content).is_some()
}

/// How many tool outputs `content` stands for: none when it is not what [`seal`] made.
pub(crate) fn outputs(content: &str) -> usize {
    sealed_id(content)
        .and_then(|id| id.split_once('.'))
        .and_then(|(_, n)| n.parse().ok())
        .unwrap_or(0)
}

/// The id of content [`seal`] made.
fn sealed_id(content: &str) -> Option<&str> {
    let (id, tag) = content.strip_prefix(PREFIX)?.rsplit_once('-')?;
    u64::from_str_radix(tag, 16)
        .is_ok_and(|tag| tag == check(id))
        .then_some(id)
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
        let content = seal(0);
        assert!(verifies(&content));
        assert_ne!(seal(0), content);
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

    #[test]
    fn sealed_content_keeps_how_many_outputs_it_stands_for() {
        assert_eq!(outputs(&seal(7)), 7);
        assert_eq!(outputs(&seal(0)), 0);
        // Sealed before the count was recorded: it verifies and stands for none.
        let id = "0123456789abcdef0123456789abcdef";
        let old = format!("{PREFIX}{id}-{:016x}", check(id));
        assert!(verifies(&old));
        assert_eq!(outputs(&old), 0);
        // A count a client changed no longer verifies, and stands for nothing.
        let changed = seal(3).replacen(".3-", ".9-", 1);
        assert!(!verifies(&changed));
        assert_eq!(outputs(&changed), 0);
    }
}
