#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may unwrap
//! An approval card shows what runs, in a real browser (headless `chromium` over WebDriver,
//! as `serve_browser`). A model's arguments are JSON text, and JSON lets that text say one
//! thing at its top and another further down: a key given twice (the last one is the one
//! a tool reads), pushed below the card's fold by blank lines. The host refuses such a call
//! to the model before anyone is asked, so no card is shown for it and nothing of it runs;
//! the timeline says why. The card shows the arguments as they are read (numbers with
//! every digit), whole: spaces inside a string cannot push a command's tail into a scroll
//! box of its own, the card never scrolls inside, so the end of the arguments is always
//! just above the buttons.

use crate::host;
use crate::served;
use crate::webdriver;
use served::Killed;

use std::process::Stdio;
use std::time::Duration;

use serde_json::json;

use host::{agentctl, answer, emulator, script_by_outputs};
use webdriver::Browser;

use served::TOKEN;
const WAIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_card_shows_the_command_that_runs() {
    let Some((chromium, chromedriver)) = webdriver::installed_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("j.db").display());
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let arguments = format!(
        "{{\"command\": \"echo looks-safe\"{}, \"command\": \"echo SECOND-RAN\"}}",
        "\n".repeat(80)
    );
    let padded = format!(
        "{{\"command\": \"echo SAFE-HEAD{}; echo HIDDEN-TAIL\", \"n\": 12345678901234567891}}",
        "\u{a0}".repeat(20_000)
    );
    let server = emulator(&script_by_outputs(&[
        json!([{"type": "function_call", "call_id": "d1", "name": "shell", "arguments": arguments}]),
        json!([{"type": "function_call", "call_id": "d2", "name": "shell", "arguments": padded}]),
        answer("done"),
    ]))
    .await;
    let served = served::serve(&db, dir.path(), &[]);
    let run = agentctl(&db)
        .args(["run", "--base-url", &server.base_url(), "--workspace"])
        .arg(&ws)
        .args([
            "--approval",
            "ask",
            "--sandbox",
            "off",
            "--wait",
            "two commands",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _run = Killed(run);

    let b = Browser::start(&chromium, &chromedriver).await;
    let outcome = std::panic::AssertUnwindSafe(async {
        b.goto(&format!("{}/?token={TOKEN}", served.base)).await;
        let row = b.wait_for("#runs tbody tr", "two commands", WAIT).await;
        let _ = row;
        let link = b.all("#runs tbody tr a").await;
        b.click(&link[0]).await;
        // The key given twice: refused, never put to a person, and it did not run.
        b.wait_for("#timeline li[data-kind='item:error']", "twice", WAIT)
            .await;
        b.wait_for(".approval[data-call-id='d2'] pre.args", "", WAIT)
            .await;
        assert!(b.all(".approval[data-call-id='d1']").await.is_empty());
        assert!(
            b.all("#timeline li[data-kind='item:command_execution']")
                .await
                .is_empty()
        );
        // A tail after 20,000 no-break spaces: the whole card is laid out, its end by the
        // buttons. A number keeps every digit (a double would end it in ...7000).
        b.wait_for(".approval[data-call-id='d2'] pre.args", "HIDDEN-TAIL", WAIT)
            .await;
        b.wait_for(
            ".approval[data-call-id='d2'] pre.args",
            "\"n\": 12345678901234567891",
            WAIT,
        )
        .await;
        let card = b
            .execute(
                "const pre = document.querySelector(\".approval[data-call-id='d2'] pre.args\"); \
                 return pre.scrollHeight <= pre.clientHeight;",
                json!([]),
            )
            .await;
        assert_eq!(card, json!(true), "the card scrolls inside");
    });
    let outcome = futures::FutureExt::catch_unwind(outcome).await;
    b.quit().await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}
