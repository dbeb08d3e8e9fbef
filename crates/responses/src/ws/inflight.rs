//! Which requests of a session are still in flight, and their deadlines.
//!
//! A `response.create` is pending until its lane's next `response.created` (FIFO per lane)
//! or an `error` on that lane; the response is then active until its terminal event. A
//! parent with an accepted steer that ends stays in flight until its successor is created,
//! a `response.steer.pending` hands the next step to the client, or the steer fails.
//! A request's deadline is `request_timeout` after it was sent, and every frame the session
//! receives moves every deadline to `request_timeout` after that frame; automatic successors
//! inherit their parent's.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use super::events::{ServerEvent, SteerEvent};
use crate::types::StreamEvent;

#[derive(Debug, Default)]
pub(crate) struct InFlight {
    pending: HashMap<Option<String>, VecDeque<Instant>>,
    active: HashMap<String, Instant>,
    steered: HashSet<String>,
    awaiting_successor: HashMap<String, Instant>,
}

impl InFlight {
    pub(crate) fn create_sent(&mut self, lane: Option<String>, deadline: Instant) {
        self.pending.entry(lane).or_default().push_back(deadline);
    }

    /// Takes back the last `create_sent` of `lane`: its frame was not written.
    pub(crate) fn create_unsent(&mut self, lane: &Option<String>) {
        if let Some(queue) = self.pending.get_mut(lane) {
            queue.pop_back();
            if queue.is_empty() {
                self.pending.remove(lane);
            }
        }
    }

    /// How many requests have an unknown outcome if the connection drops now.
    pub(crate) fn count(&self) -> usize {
        self.pending.values().map(VecDeque::len).sum::<usize>()
            + self.active.len()
            + self.awaiting_successor.len()
    }

    /// Moves every deadline to `deadline` (a frame came: nothing in flight is silent).
    pub(crate) fn refresh(&mut self, deadline: Instant) {
        for at in self
            .pending
            .values_mut()
            .flat_map(|q| q.iter_mut())
            .chain(self.active.values_mut())
            .chain(self.awaiting_successor.values_mut())
        {
            *at = deadline;
        }
    }

    /// The earliest deadline of anything in flight.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.pending
            .values()
            .flat_map(|q| q.iter().copied())
            .chain(self.active.values().copied())
            .chain(self.awaiting_successor.values().copied())
            .min()
    }

    /// Everything in flight is now of unknown outcome (the connection dropped).
    pub(crate) fn clear(&mut self) {
        *self = Self::default();
    }

    pub(crate) fn observe(
        &mut self,
        event: &ServerEvent,
        now: Instant,
        timeout: std::time::Duration,
    ) {
        let lane = event.stream_id().map(str::to_owned);
        match event {
            ServerEvent::Stream(StreamEvent::Created(e)) => {
                let id = e.response.id.clone();
                let parent = e
                    .response
                    .extra
                    .get("previous_response_id")
                    .and_then(Value::as_str);
                let inherited = parent.and_then(|p| self.awaiting_successor.remove(p));
                let deadline = match inherited {
                    Some(d) => d,
                    None => self
                        .pop_pending(&lane)
                        .unwrap_or_else(|| deadline_after(now, timeout)),
                };
                self.active.insert(id, deadline);
            }
            ServerEvent::Stream(
                StreamEvent::Completed(e) | StreamEvent::Failed(e) | StreamEvent::Incomplete(e),
            ) => {
                let id = &e.response.id;
                if let Some(deadline) = self.active.remove(id)
                    && self.steered.remove(id)
                {
                    self.awaiting_successor.insert(id.clone(), deadline);
                }
            }
            ServerEvent::Stream(StreamEvent::Error(_)) => {
                let _ = self.pop_pending(&lane);
            }
            ServerEvent::Steer(SteerEvent::Accepted(e)) => {
                let parent = &e.steer.previous_response_id;
                if self.active.contains_key(parent) {
                    self.steered.insert(parent.clone());
                }
            }
            ServerEvent::Steer(SteerEvent::Pending(e)) => {
                let parent = &e.steer.previous_response_id;
                self.awaiting_successor.remove(parent);
                self.steered.remove(parent);
            }
            ServerEvent::Steer(SteerEvent::Failed(e)) => {
                let parent = &e.steer.previous_response_id;
                self.awaiting_successor.remove(parent);
                self.steered.remove(parent);
            }
            ServerEvent::Steer(SteerEvent::Other(_)) | ServerEvent::Stream(_) => {}
        }
    }

    fn pop_pending(&mut self, lane: &Option<String>) -> Option<Instant> {
        let queue = self.pending.get_mut(lane)?;
        let front = queue.pop_front();
        if queue.is_empty() {
            self.pending.remove(lane);
        }
        front
    }
}

/// `now + timeout`, or a year from now for a timeout too long to add to an `Instant`.
pub(crate) fn deadline_after(now: Instant, timeout: Duration) -> Instant {
    const FAR: Duration = Duration::from_secs(365 * 24 * 3600);
    now.checked_add(timeout.min(FAR)).unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_too_long_for_an_instant_is_capped_not_a_panic() {
        let now = Instant::now();
        assert_eq!(
            deadline_after(now, Duration::from_secs(5)),
            now + Duration::from_secs(5)
        );
        assert!(deadline_after(now, Duration::MAX) > now + Duration::from_secs(3600));
    }
}
