#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may unwrap
//! A page of another origin that opens the console (another local server's page, here the
//! same server under the name `localhost`, which is another origin than `127.0.0.1`) keeps
//! no handle on it: the console's `Cross-Origin-Opener-Policy` puts it in a browsing
//! context group of its own, so the opener's window object reads as closed and cannot
//! navigate it to another run, or to a look-alike page, behind the user's back. A real
//! headless `chromium` over WebDriver, as `serve_browser`.

use crate::served;
use crate::webdriver;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use webdriver::Browser;

use served::TOKEN;

/// Opens `url` from the current page and waits (up to 10 s) until the opener's handle on
/// it reads closed; returns whether it did.
async fn opened_window_reads_closed(b: &Browser, url: &str) -> bool {
    b.execute(
        "window.opened = window.open(arguments[0], '_blank'); return true",
        json!([url]),
    )
    .await;
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        let closed = b.execute("return window.opened.closed", json!([])).await;
        if closed == Value::Bool(true) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_of_another_origin_keeps_no_handle_on_the_console_it_opens() {
    let Some((chromium, chromedriver)) = webdriver::installed_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("j.db").display());
    let served = served::serve(&db, dir.path(), &[]);
    let port = served.host.rsplit(':').next().unwrap();
    let other = format!("http://localhost:{port}");
    let b = Browser::start(&chromium, &chromedriver).await;
    // The opener: an API answer (JSON, no console headers) of the other origin.
    b.goto(&format!("{other}/api/v1/runs")).await;

    // The check can see a handle that stays open: a page without the console's headers
    // (the API's own answer, same origin as the opener) opened the same way.
    assert!(
        !opened_window_reads_closed(&b, &format!("{other}/api/v1/search")).await,
        "a plain page opened from the opener read closed: the check proves nothing"
    );
    let href = b
        .execute("return window.opened.location.href", json!([]))
        .await;
    assert_eq!(href, json!(format!("{other}/api/v1/search")));

    // The console, signed in through its link, on the other origin.
    assert!(
        opened_window_reads_closed(&b, &format!("{}/?token={TOKEN}", served.base)).await,
        "the page that opened the console still holds a handle on it"
    );
    b.quit().await;
}
