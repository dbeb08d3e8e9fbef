//! Paging a run's events: the pages are the bytes of one unpaged read, and a page that goes
//! on from the previous one reads nothing again to prime its converter.

use std::sync::Arc;

use agent_host::run::kinds;
use agent_journal::{Journal, NewEvent};
use futures::StreamExt as _;
use serde_json::{Value, json};

use super::{Converter, Converters, page};

const STEPS: u64 = 40;

/// A run `r` of [`STEPS`] steps, each a message, a shell call, and the call's result.
async fn run() -> Journal {
    let journal = Journal::open("memory:").await.unwrap();
    let append = |kind: &str, payload: Value| {
        let journal = journal.clone();
        let kind = kind.to_string();
        async move {
            journal
                .append(NewEvent::new("run:r", kind, payload))
                .await
                .unwrap();
        }
    };
    append(
        kinds::RUN_CREATED,
        json!({"prompt": "p", "model": "m", "workspace": "/w", "tools": [],
               "approval": "default", "budgets": {"max_steps": 50},
               "owner": {"host": "h", "pid": 1}}),
    )
    .await;
    for step in 1..=STEPS {
        let call = format!("c{step}");
        append(
            kinds::MODEL_COMPLETED,
            json!({"step": step, "response_id": format!("resp{step}"),
                "output": [
                    {"type": "message", "role": "assistant",
                     "content": [{"type": "output_text", "text": format!("step {step}")}]},
                    {"type": "function_call", "call_id": call, "name": "shell",
                     "arguments": format!("{{\"command\": \"echo {step}\"}}")}],
                "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}}),
        )
        .await;
        append("tool.scheduled", json!({"turn_id": "t1", "call_id": call})).await;
        append(
            "tool.completed",
            json!({"turn_id": "t1", "call_id": call, "value": format!("out {step}")}),
        )
        .await;
    }
    journal
}

fn json_of(events: &[super::ApiEvent]) -> Vec<Value> {
    events
        .iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .collect()
}

/// The whole run, read at once by a server that kept nothing.
async fn unpaged(journal: &Journal) -> Vec<Value> {
    let home = Arc::new(Converters::default());
    let (events, more) = page(&home, journal, "r", 0, 5000).await.unwrap();
    assert!(!more);
    assert_eq!(events.len() as u64, 1 + 3 * STEPS);
    json_of(&events)
}

#[tokio::test]
async fn pages_of_any_size_are_the_unpaged_read_and_prime_by_reading_nothing_again() {
    let journal = run().await;
    let whole = unpaged(&journal).await;
    // The converter's state shows in the pages: items numbered across the run, results
    // named after their calls' tools.
    let text = serde_json::to_string(&whole).unwrap();
    assert!(text.contains(&format!("item_{STEPS}")), "{text}");
    assert!(text.contains("command_execution"), "{text}");
    for limit in [1, 2, 3, 7, 50] {
        let home = Arc::new(Converters::default());
        let mut after = 0;
        let mut pages = Vec::new();
        loop {
            let (events, more) = page(&home, &journal, "r", after, limit).await.unwrap();
            after = events.last().map_or(after, |e| e.seq);
            pages.extend(json_of(&events));
            if !more {
                break;
            }
        }
        assert_eq!(pages, whole, "pages of {limit}");
        // Each page went on with the converter the one before left: no event was read
        // again to prime one (a new converter a page reads the run up to `after`).
        assert_eq!(home.primed_events(), 0, "pages of {limit}");
    }
}

#[tokio::test]
async fn a_reader_further_on_primes_from_a_kept_converter_before_it() {
    let journal = run().await;
    let whole = unpaged(&journal).await;
    let home = Arc::new(Converters::default());
    let (first, _) = page(&home, &journal, "r", 0, 10).await.unwrap();
    let kept_at = first.last().unwrap().seq;
    let after = whole[60]["seq"].as_i64().unwrap();
    let (later, _) = page(&home, &journal, "r", after, 5000).await.unwrap();
    assert_eq!(json_of(&later), whole[61..].to_vec());
    // Only the events between the kept converter and `after` (and the one after it, which
    // ends the priming) were read to prime.
    assert_eq!(
        home.primed_events(),
        51 + 1,
        "kept at {kept_at}, after {after}"
    );
    // A reader with nothing kept before it primes from the first event, to the same bytes.
    let cold = Arc::new(Converters::default());
    let (again, _) = page(&cold, &journal, "r", after, 5000).await.unwrap();
    assert_eq!(json_of(&again), whole[61..].to_vec());
}

#[tokio::test]
async fn a_stream_that_ends_leaves_its_converter_for_the_reconnect() {
    let journal = run().await;
    let whole = unpaged(&journal).await;
    let home = Arc::new(Converters::default());
    let conv = Converter::primed(&home, &journal, "r", 0).await.unwrap();
    let events = journal.replay_stream("run:r", 0);
    let sent: Vec<_> = crate::routes::runs::messages(events, conv)
        .take(20)
        .collect()
        .await;
    assert_eq!(sent.len(), 20);
    // The client got 20 events and reconnects with the last one's id.
    let last = whole[19]["seq"].as_i64().unwrap();
    let (rest, _) = page(&home, &journal, "r", last, 5000).await.unwrap();
    assert_eq!(json_of(&rest), whole[20..].to_vec());
    assert_eq!(home.primed_events(), 0);
}

#[test]
fn at_most_capacity_converters_are_kept_the_oldest_going_first() {
    let home = Converters::default();
    for seen in 1..=(Converters::CAPACITY as i64 + 1) {
        home.keep(
            "r".into(),
            seen,
            agent_host::run::exec_json::ExecJson::new("r"),
        );
    }
    assert!(home.take("r", 1).is_none(), "the oldest went");
    let (seen, _) = home.take("r", i64::MAX).unwrap();
    assert_eq!(
        seen,
        Converters::CAPACITY as i64 + 1,
        "the furthest on is taken"
    );
    assert!(home.take("other", i64::MAX).is_none());
}
