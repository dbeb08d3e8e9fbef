//! Leases and fenced appends, run against SQLite, PostgreSQL and `memory:` alike.

use crate::support;

use std::time::Duration;

use agent_journal::{JournalError, LeaseStatus, NewEvent};
use serde_json::json;

use support::{Fixture, defaults};

agent_testkit::backend_tests!(defaults, [sqlite, postgres, memory]:
    claims_take_free_open_leases_oldest_first_once_each,
    a_new_claim_fences_the_old_holder_s_appends_renewals_and_release,
    release_closes_or_reopens_and_reclaim_takes_one_s_own_lease_back,
    concurrent_claimers_take_each_lease_exactly_once,
    no_append_of_an_old_epoch_lands_after_a_new_claim,
    info_too_deep_to_read_back_is_refused_and_changes_nothing,
    a_claim_passes_over_the_expired_leases_it_is_told_to_skip,
);

const LONG: Duration = Duration::from_secs(60);
const EXPIRED: Duration = Duration::ZERO;

fn ev(thread: &str, n: i64) -> NewEvent {
    NewEvent::new(thread, "k", json!({ "n": n }))
}

async fn claims_take_free_open_leases_oldest_first_once_each(f: Fixture) {
    let j = &f.journal;
    assert!(j.offer_lease("run:a", &json!({"n": 1})).await.unwrap());
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert!(j.offer_lease("run:b", &json!({})).await.unwrap());
    assert!(j.offer_lease("other:c", &json!({})).await.unwrap());
    // Offering again changes nothing.
    assert!(!j.offer_lease("run:a", &json!({"n": 2})).await.unwrap());
    let a = j.claim_lease("run:", "w1", LONG).await.unwrap().unwrap();
    assert_eq!(
        (a.name.as_str(), a.epoch, a.holder.as_str()),
        ("run:a", 1, "w1")
    );
    let b = j.claim_lease("run:", "w2", LONG).await.unwrap().unwrap();
    assert_eq!((b.name.as_str(), b.epoch), ("run:b", 1));
    assert!(j.claim_lease("run:", "w3", LONG).await.unwrap().is_none());
    let rows = j.leases("run:").await.unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].holder.as_deref(), Some("w1"));
    assert_eq!(rows[0].info, json!({"n": 1}));
    assert!(rows[0].expires_at > rows[0].updated_at);
}

async fn a_new_claim_fences_the_old_holder_s_appends_renewals_and_release(f: Fixture) {
    let j = &f.journal;
    j.offer_lease("run:a", &json!({})).await.unwrap();
    // Claimed with no time left: the next claimer may take it.
    let old = j.claim_lease("run:", "w1", EXPIRED).await.unwrap().unwrap();
    let old_handle = j.fenced(&old);
    old_handle.append(ev("run:a", 1)).await.unwrap();
    let new = j.claim_lease("run:", "w2", LONG).await.unwrap().unwrap();
    assert_eq!(new.epoch, old.epoch + 1);
    let refused = |r: Result<_, JournalError>| match r {
        Err(JournalError::Fenced {
            lease,
            epoch,
            current,
        }) => {
            assert_eq!((lease.as_str(), epoch, current), ("run:a", 1, Some(2)));
        }
        other => panic!("expected Fenced, got {other:?}"),
    };
    refused(old_handle.append(ev("run:a", 2)).await.map(drop));
    refused(
        old_handle
            .append_batch(vec![ev("run:a", 3), ev("run:b", 3)])
            .await
            .map(drop),
    );
    refused(
        old_handle
            .append_expecting("run:a", Some(1), vec![ev("run:a", 4)])
            .await
            .map(drop),
    );
    refused(j.renew_lease(&old, LONG, None).await.map(drop));
    refused(j.release_lease(&old, LeaseStatus::Open, &json!({})).await);
    j.fenced(&new).append(ev("run:a", 5)).await.unwrap();
    // Unfenced handles are not affected.
    j.append(ev("run:a", 6)).await.unwrap();
    let events = j.replay("run:a", 0).await.unwrap();
    let seen: Vec<(i64, Option<i64>)> = events
        .iter()
        .map(|e| (e.payload["n"].as_i64().unwrap(), e.epoch))
        .collect();
    assert_eq!(seen, vec![(1, Some(1)), (5, Some(2)), (6, None)]);
    assert!(j.replay("run:b", 0).await.unwrap().is_empty());
    // The row is still the new holder's.
    let renewed = j
        .renew_lease(&new, LONG, Some(&json!({"steps": 3})))
        .await
        .unwrap();
    assert!(renewed.expires_at >= new.expires_at);
    assert_eq!(
        j.leases("run:a").await.unwrap()[0].info,
        json!({"steps": 3})
    );
}

async fn release_closes_or_reopens_and_reclaim_takes_one_s_own_lease_back(f: Fixture) {
    let j = &f.journal;
    j.offer_lease("run:a", &json!({})).await.unwrap();
    let first = j.claim_lease("run:", "w1", LONG).await.unwrap().unwrap();
    // Held and not expired: nobody else gets it, by prefix or by name.
    assert!(
        j.reclaim_lease("run:a", "w2", LONG)
            .await
            .unwrap()
            .is_none()
    );
    // Its holder takes it back (after reopening its journal, say): the epoch moves on.
    let again = j.reclaim_lease("run:a", "w1", LONG).await.unwrap().unwrap();
    assert_eq!(again.epoch, first.epoch + 1);
    assert!(matches!(
        j.fenced(&first).append(ev("run:a", 1)).await,
        Err(JournalError::Fenced { .. })
    ));
    j.release_lease(&again, LeaseStatus::Closed, &json!({"status": "paused"}))
        .await
        .unwrap();
    let row = &j.leases("run:").await.unwrap()[0];
    assert_eq!(
        (row.status, row.holder.as_deref()),
        (LeaseStatus::Closed, None)
    );
    assert_eq!(row.info, json!({"status": "paused"}));
    assert!(j.claim_lease("run:", "w2", LONG).await.unwrap().is_none());
    assert!(
        j.reclaim_lease("run:a", "w2", LONG)
            .await
            .unwrap()
            .is_none()
    );
    // Info only: the status stays closed.
    j.put_lease("run:a", None, &json!({"status": "paused", "n": 1}))
        .await
        .unwrap();
    assert!(j.claim_lease("run:", "w2", LONG).await.unwrap().is_none());
    j.put_lease(
        "run:a",
        Some(LeaseStatus::Open),
        &json!({"status": "queued"}),
    )
    .await
    .unwrap();
    let third = j.claim_lease("run:", "w2", LONG).await.unwrap().unwrap();
    assert_eq!(third.epoch, again.epoch + 1);
    // put_lease creates a missing row, unclaimed and closed unless told otherwise.
    j.put_lease("run:z", None, &json!({})).await.unwrap();
    let z = &j.leases("run:z").await.unwrap()[0];
    assert_eq!((z.epoch, z.status), (0, LeaseStatus::Closed));
    assert!(matches!(
        j.offer_lease("", &json!({})).await,
        Err(JournalError::InvalidInput { .. })
    ));
}

/// A worker stalled past its lease's expiry must not claim its own run again (the new
/// epoch fenced its own live drive); a restarted worker of the same name, which skips
/// nothing, still takes its predecessor's expired leases.
async fn a_claim_passes_over_the_expired_leases_it_is_told_to_skip(f: Fixture) {
    let j = &f.journal;
    j.offer_lease("run:a", &json!({})).await.unwrap();
    j.offer_lease("run:b", &json!({})).await.unwrap();
    let a = j
        .reclaim_lease("run:a", "w1", EXPIRED)
        .await
        .unwrap()
        .unwrap();
    let b = j
        .reclaim_lease("run:b", "w1", EXPIRED)
        .await
        .unwrap()
        .unwrap();
    let driving = vec![a.name.clone(), b.name.clone()];
    assert!(
        j.claim_lease_skipping("run:", "w1", LONG, &driving)
            .await
            .unwrap()
            .is_none()
    );
    // Both still at their epochs: the holder renews them.
    j.renew_lease(&a, LONG, None).await.unwrap();
    // Skipping one of two: the other is claimed.
    let again = j
        .claim_lease_skipping("run:", "w1", LONG, &driving[..1])
        .await
        .unwrap()
        .unwrap();
    assert_eq!((again.name.as_str(), again.epoch), ("run:b", b.epoch + 1));
    // A process of the same name that drives nothing takes an expired lease of that name.
    let c = j
        .claim_lease_skipping("run:", "w1", EXPIRED, &[])
        .await
        .unwrap();
    assert!(c.is_none(), "run:a was renewed and run:b claimed for LONG");
    j.offer_lease("run:c", &json!({})).await.unwrap();
    let c = j.claim_lease("run:", "w1", EXPIRED).await.unwrap().unwrap();
    let taken = j
        .claim_lease_skipping("run:", "w1", LONG, &[])
        .await
        .unwrap()
        .unwrap();
    assert_eq!((taken.name.as_str(), taken.epoch), ("run:c", c.epoch + 1));
}

async fn concurrent_claimers_take_each_lease_exactly_once(f: Fixture) {
    let j = f.journal.clone();
    for n in 0..10 {
        j.offer_lease(&format!("run:{n:02}"), &json!({}))
            .await
            .unwrap();
    }
    let tasks: Vec<_> = (0..16)
        .map(|w| {
            let j = j.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                while let Some(lease) = j.claim_lease("run:", &format!("w{w}"), LONG).await.unwrap()
                {
                    got.push(lease.name);
                }
                got
            })
        })
        .collect();
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    all.sort();
    let expected: Vec<String> = (0..10).map(|n| format!("run:{n:02}")).collect();
    assert_eq!(all, expected);
    assert!(j.leases("run:").await.unwrap().iter().all(|r| r.epoch == 1));
}

async fn no_append_of_an_old_epoch_lands_after_a_new_claim(f: Fixture) {
    let j = f.journal.clone();
    j.offer_lease("run:a", &json!({})).await.unwrap();
    let old = j
        .claim_lease("run:", "zombie", EXPIRED)
        .await
        .unwrap()
        .unwrap();
    let zombie = j.fenced(&old);
    let writer = tokio::spawn(async move {
        let mut written = 0;
        for n in 0..400 {
            match zombie.append(ev("run:a", n)).await {
                Ok(_) => written += 1,
                Err(JournalError::Fenced { .. }) => return (written, true),
                Err(err) => panic!("{err}"),
            }
        }
        (written, false)
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    // A claim skips a row that a write transaction holds (SKIP LOCKED on PostgreSQL): a
    // claimer tries again, as a worker does at its next poll.
    let new = loop {
        if let Some(lease) = j.claim_lease("run:", "w2", LONG).await.unwrap() {
            break lease;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    let first_new = j.fenced(&new).append(ev("run:a", 1000)).await.unwrap().seq;
    let (written, fenced) = writer.await.unwrap();
    let events = j.replay("run:a", 0).await.unwrap();
    assert_eq!(
        events.iter().filter(|e| e.epoch == Some(1)).count(),
        written
    );
    if fenced {
        assert!(
            events
                .iter()
                .all(|e| e.epoch != Some(1) || e.seq < first_new),
            "an old-epoch append landed after the new holder's first write"
        );
    }
    // Epochs never go down along the thread.
    assert!(events.windows(2).all(|w| w[0].epoch <= w[1].epoch));
}

/// Lease info nested deeper than any read takes back (it would read back as null) is
/// refused by every call that writes info, and leaves the lease as it was; 127 levels are
/// kept.
async fn info_too_deep_to_read_back_is_refused_and_changes_nothing(f: Fixture) {
    fn nested(depth: usize) -> serde_json::Value {
        (1..depth).fold(json!([]), |inner, _| json!([inner]))
    }
    let j = &f.journal;
    let deep = nested(128);
    let refused = |result: Result<_, JournalError>| {
        matches!(
            result,
            Err(JournalError::InvalidInput {
                field: "lease info",
                ..
            })
        )
    };
    assert!(refused(j.offer_lease("run:d", &deep).await.map(|_| ())));
    assert!(j.leases("run:d").await.unwrap().is_empty());
    j.offer_lease("run:d", &json!({"n": 1})).await.unwrap();
    assert!(refused(j.put_lease("run:d", None, &deep).await));
    let lease = j.claim_lease("run:", "w1", LONG).await.unwrap().unwrap();
    assert!(refused(
        j.renew_lease(&lease, LONG, Some(&deep)).await.map(|_| ())
    ));
    assert!(refused(
        j.release_lease(&lease, LeaseStatus::Closed, &deep).await
    ));
    let row = &j.leases("run:d").await.unwrap()[0];
    assert_eq!(row.info, json!({"n": 1}));
    assert_eq!(row.holder.as_deref(), Some("w1"));
    // At the limit it is kept as written.
    let kept = nested(127);
    j.release_lease(&lease, LeaseStatus::Closed, &kept)
        .await
        .unwrap();
    assert_eq!(j.leases("run:d").await.unwrap()[0].info, kept);
}
