//! A stored conversation as a chain: the conversation a response continues is shared
//! (an `Arc` to its parent's chain), and each link holds only the items its response added
//! (its new input and its output). A conversation continued N times with
//! `previous_response_id` is stored once, in N links, not as N growing copies.
//!
//! Invariants: a link's `len` is its parent's `len` plus its own items; links are
//! immutable once made; dropping a long chain walks it iteratively (no recursion per link,
//! so a conversation of any length drops without overflowing the stack).

use std::sync::Arc;

use agent_responses::types::Item;

/// One link of a conversation: what it continues, and the items it added.
#[derive(Debug, Default)]
pub(crate) struct Chain {
    parent: Option<Arc<Chain>>,
    own: Vec<Item>,
    len: usize,
    /// The JSON length of `own` ([`crate::bounded::json_len`]): what this link weighs.
    own_bytes: usize,
}

impl Chain {
    /// The conversation `full`, which starts with `base`'s items (the caller read them
    /// with [`to_vec`](Self::to_vec) and appended to them): shares `base` and keeps only
    /// the items after it. A `full` shorter than `base` is kept whole, unshared.
    pub(crate) fn after(base: Option<&Arc<Chain>>, mut full: Vec<Item>) -> Arc<Chain> {
        let shared = base.map_or(0, |b| b.len);
        let (parent, own) = match base {
            Some(base) if shared > 0 && full.len() >= shared => {
                (Some(Arc::clone(base)), full.split_off(shared))
            }
            _ => (None, full),
        };
        let len = parent.as_ref().map_or(0, |p| p.len) + own.len();
        let own_bytes = crate::bounded::json_len(&own);
        Arc::new(Chain {
            parent,
            own,
            len,
            own_bytes,
        })
    }

    /// The estimated bytes of the items this link added (what it continues is counted
    /// by the stored response it belongs to).
    pub(crate) fn own_bytes(&self) -> usize {
        self.own_bytes
    }

    /// Every item of the conversation, oldest first.
    pub(crate) fn to_vec(&self) -> Vec<Item> {
        let mut links = Vec::new();
        let mut link = Some(self);
        while let Some(current) = link {
            links.push(&current.own);
            link = current.parent.as_deref();
        }
        let mut items = Vec::with_capacity(self.len);
        for own in links.into_iter().rev() {
            items.extend(own.iter().cloned());
        }
        items
    }

    /// How many items the conversation holds.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The items this link added (not its parent's).
    #[cfg(test)]
    pub(crate) fn own(&self) -> &[Item] {
        &self.own
    }

    /// The conversation this link continues, if any.
    #[cfg(test)]
    pub(crate) fn parent(&self) -> Option<&Arc<Chain>> {
        self.parent.as_ref()
    }
}

impl Drop for Chain {
    fn drop(&mut self) {
        // Unlink parents this link held last, one at a time, instead of recursively.
        let mut parent = self.parent.take();
        while let Some(link) = parent {
            parent = match Arc::try_unwrap(link) {
                Ok(mut link) => link.parent.take(),
                Err(_) => None,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::script::user;

    #[test]
    fn a_continued_conversation_shares_what_it_continues() {
        let first = Chain::after(None, vec![user("a"), user("b")]);
        let mut full = first.to_vec();
        full.push(user("c"));
        let second = Chain::after(Some(&first), full);
        assert_eq!(second.own(), &[user("c")]);
        assert!(Arc::ptr_eq(second.parent().unwrap(), &first));
        assert_eq!(second.len(), 3);
        assert_eq!(second.to_vec(), vec![user("a"), user("b"), user("c")]);
        // Not a continuation of `first` after all: kept whole.
        let other = Chain::after(Some(&first), vec![user("x")]);
        assert!(other.parent().is_none());
        assert_eq!(other.to_vec(), vec![user("x")]);
    }

    #[test]
    fn a_conversation_continued_n_times_stores_each_item_once() {
        let mut link = Chain::after(None, vec![user("0")]);
        for n in 1..100 {
            let mut full = link.to_vec();
            full.push(user(&n.to_string()));
            link = Chain::after(Some(&link), full);
        }
        let (mut stored, mut links) = (0, 0);
        let mut at = Some(&link);
        while let Some(current) = at {
            stored += current.own().len();
            links += 1;
            at = current.parent();
        }
        assert_eq!((stored, links), (100, 100), "not 100 * 101 / 2 items");
        assert_eq!(link.to_vec().len(), 100);
        assert_eq!(link.to_vec()[99], user("99"));
    }

    #[test]
    fn a_long_chain_drops_without_recursion() {
        let mut deep = Chain::after(None, vec![user("0")]);
        for _ in 0..1_000_000 {
            deep = Arc::new(Chain {
                parent: Some(deep),
                own: Vec::new(),
                len: 1,
                own_bytes: 0,
            });
        }
        drop(deep);
    }
}
