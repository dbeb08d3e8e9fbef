#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may unwrap
//! What the console leaves in the browser's profile (a real headless `chromium` over
//! WebDriver, as `serve_browser`, with its profile in a directory the test reads after the
//! browser quit): a run's prompt, shown by the runs table and the run's page, is not in the
//! browser's disk cache once the session is over; a token typed into the login page is
//! nowhere in it (its history above all).

use crate::host;
use crate::served;
use crate::webdriver;

use std::time::Duration;

use host::{agentctl, text};
use webdriver::Browser;

use served::TOKEN;
const WAIT: Duration = Duration::from_secs(30);
/// The prompt of the run: what must not stay behind.
const SECRET: &str = "deploy with key SECRET-PROMPT-5T8W";

/// Whether any file under `dir` holds `needle`.
fn any_file_holds(dir: &std::path::Path, needle: &[u8]) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().any(|entry| {
        let path = entry.path();
        if path.is_dir() {
            return any_file_holds(&path, needle);
        }
        std::fs::read(&path).is_ok_and(|bytes| bytes.windows(needle.len()).any(|w| w == needle))
    })
}

/// Quits `b` and waits for it to have written its profile.
async fn quit(b: Browser) {
    b.quit().await;
    drop(b);
    // The browser writes its cache and history as it quits.
    tokio::time::sleep(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_data_stays_out_of_the_browsers_disk_cache() {
    let Some((chromium, chromedriver)) = webdriver::installed_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("j.db").display());
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    // A queued run (no worker takes it): the table and its page show its prompt.
    let o = host::out(
        agentctl(&db)
            .args([
                "submit",
                "--base-url",
                "http://127.0.0.1:9/v1",
                "--workspace",
            ])
            .arg(&ws)
            .arg(SECRET),
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let run = text(&o.stdout).trim().to_string();
    let served = served::serve(&db, dir.path(), &[]);
    let base = &served.base;

    let profile = dir.path().join("profile");
    let b = Browser::start_in(&chromium, &chromedriver, Some(&profile)).await;
    b.goto(&format!("{base}/?token={TOKEN}")).await;
    b.wait_for("#runs", SECRET, WAIT).await;
    b.goto(&format!("{base}/#/runs/{run}")).await;
    b.wait_for(".run-title", SECRET, WAIT).await;
    // Let a refresh or two of the page's header land too.
    tokio::time::sleep(Duration::from_secs(2)).await;
    quit(b).await;
    let cache = profile.join("Default");
    assert!(cache.is_dir(), "no profile at {}", cache.display());
    assert!(
        !any_file_holds(&cache.join("Cache"), SECRET.as_bytes()),
        "the run's prompt is in the browser's disk cache ({})",
        cache.join("Cache").display()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_typed_into_the_login_page_stays_out_of_the_history() {
    let Some((chromium, chromedriver)) = webdriver::installed_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("j.db").display());
    let served = served::serve(&db, dir.path(), &[]);
    let profile = dir.path().join("profile");
    let b = Browser::start_in(&chromium, &chromedriver, Some(&profile)).await;
    b.goto(&format!("{}/", served.base)).await;
    let field = b.wait_for("#login #token", "", WAIT).await;
    b.type_into(&field, TOKEN).await;
    let button = b.all("#login button").await;
    b.click(&button[0]).await;
    b.wait_for("#runs", "", WAIT).await;
    let url = b
        .execute("return location.href", serde_json::json!([]))
        .await;
    assert_eq!(url, serde_json::json!(format!("{}/", served.base)));
    quit(b).await;
    let profile = profile.join("Default");
    assert!(
        profile.join("History").is_file(),
        "no history at {}",
        profile.display()
    );
    assert!(
        !any_file_holds(&profile, TOKEN.as_bytes()),
        "the token is in the browser's profile ({})",
        profile.display()
    );
}
