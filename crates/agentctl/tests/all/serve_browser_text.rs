#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may unwrap
//! Hostile text in the console, in a real browser (headless `chromium` over WebDriver, as
//! `serve_browser`): a prompt, a model's message, a tool call's arguments and an approval's
//! reason that hold HTML, script, a `javascript:` URL, a carriage return and bidirectional
//! overrides. Each is shown as the text it is: no element or handler comes of it, and the
//! characters that would make it read as other text (U+202E turns `# hs | txt.evil` into
//! what looks like a harmless comment) are shown escaped, as the CLI shows them. And an
//! event dated beyond what a browser's `Date` holds still has its timeline entry (and
//! takes no other entry with it).

use crate::host;
use crate::served;
use crate::webdriver;
use served::Killed;

use std::process::Stdio;
use std::time::Duration;

use serde_json::json;

use host::{agentctl, answer, call, emulator, script_by_outputs};
use webdriver::Browser;

use served::TOKEN;
const WAIT: Duration = Duration::from_secs(30);

/// HTML that would run script, were it ever parsed as HTML.
const HTML: &str = "<img src=x onerror=\"window.pwned=1\"><script>window.pwned=2</script>\
                    \"'><svg onload=\"window.pwned=3\"><a href=\"javascript:window.pwned=4\">x</a>";
/// What the model's command holds after `#`: U+202E makes `evil.txt | sh` read backwards.
const TAIL: &str = "\u{202e} hs | txt.live";
/// Format characters a browser acts on without showing them: a right-to-left mark made
/// `cat <RLM> 1 > 2` read as `cat 2 < 1`, a zero-width space and a soft hyphen are not seen.
const MARKS: &str = "cat \u{200f} 1 > 2; a\u{200b}b\u{ad}c";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_text_is_shown_as_the_text_it_is() {
    let Some((chromium, chromedriver)) = webdriver::installed_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("j.db").display());
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let mut first = answer(&format!("MSG {HTML}\r\nevent: error\r\ndata: x\u{2066}"));
    first.as_array_mut().unwrap().push(call(
        "c1",
        "shell",
        json!({"command": format!("{MARKS}; echo '{HTML}' #{TAIL}")}),
    ));
    let server = emulator(&script_by_outputs(&[
        first,
        answer(&format!("FINAL {HTML}")),
    ]))
    .await;
    let served = served::serve(&db, dir.path(), &[]);
    let run = agentctl(&db)
        .args(["run", "--base-url", &server.base_url(), "--workspace"])
        .arg(&ws)
        .args(["--approval", "ask", "--sandbox", "off", "--wait"])
        .arg(format!("\u{202e}olleh PROMPT {HTML}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _run = Killed(run);
    let run = wait_for_run(&db).await;

    let browser = Browser::start(&chromium, &chromedriver).await;
    let outcome = scenario(&browser, &served.base, &run).await;
    if outcome.is_err() {
        let dir =
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/serve-browser");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("hostile.png"), browser.screenshot().await).unwrap();
        std::fs::write(dir.join("hostile.html"), browser.source().await).unwrap();
    }
    browser.quit().await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// The id of the one run of `db`, once there is one.
async fn wait_for_run(db: &str) -> String {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let o = host::out(agentctl(db).args(["--json", "runs", "list"]));
        let found = String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find_map(|v| v["run_id"].as_str().map(str::to_string));
        if let Some(id) = found {
            return id;
        }
        assert!(std::time::Instant::now() < deadline, "no run started");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Nothing the page did not make itself: no image, frame, inline script or handler
/// attribute, no `javascript:` link, and no script of the run's text ran.
async fn assert_nothing_injected(b: &Browser) {
    let found = b
        .execute(
            "return [window.pwned === undefined, \
             document.querySelectorAll('img, iframe, object, embed, script:not([src]), main svg a').length, \
             [...document.querySelectorAll('*')].filter(e => [...e.attributes].some(a => /^on/i.test(a.name))).length, \
             [...document.querySelectorAll('a')].filter(a => !/^#/.test(a.getAttribute('href'))).length]",
            json!([]),
        )
        .await;
    assert_eq!(found, json!([true, 0, 0, 0]));
}

async fn scenario(b: &Browser, base: &str, run: &str) -> Result<(), Box<dyn std::any::Any + Send>> {
    use futures::FutureExt as _;
    std::panic::AssertUnwindSafe(async {
        b.goto(&format!("{base}/?token={TOKEN}")).await;
        b.wait_for("#runs", "PROMPT", WAIT).await;
        assert_nothing_injected(b).await;
        b.goto(&format!("{base}/#/runs/{run}")).await;
        b.wait_for(".approval[data-call-id='c1']", "onerror", WAIT)
            .await;
        b.wait_for("#timeline li[data-kind='item:agent_message']", "MSG", WAIT)
            .await;
        assert_nothing_injected(b).await;

        // The HTML is there as text, in the card, the title and the timeline.
        let shown = |css: &str| {
            let script = format!("return document.querySelector(\"{css}\").textContent");
            async move {
                b.execute(&script, json!([]))
                    .await
                    .as_str()
                    .unwrap()
                    .to_string()
            }
        };
        let card = shown(".approval[data-call-id='c1'] pre.args").await;
        assert!(
            card.contains(r#"<img src=x onerror=\"window.pwned=1\">"#),
            "{card}"
        );
        // What runs is shown as it reads: the override is written out, not obeyed, and so
        // are the marks, the zero-width space and the soft hyphen; the card is laid out in
        // the order it is read, whatever letters it holds.
        assert!(card.contains(r#"#\u{202e} hs | txt.live""#), "{card}");
        assert!(
            card.contains(r#"cat \u{200f} 1 > 2; a\u{200b}b\u{ad}c"#),
            "{card}"
        );
        let layout = b
            .execute(
                "const s = getComputedStyle(document.querySelector(\".approval[data-call-id='c1'] pre.args\")); \
                 return [s.direction, s.unicodeBidi];",
                json!([]),
            )
            .await;
        assert_eq!(layout, json!(["ltr", "bidi-override"]));
        // (A title is the prompt's first 120 characters.)
        let title = shown(".run-title").await;
        assert!(
            title.starts_with(r#"\u{202e}olleh PROMPT <img src=x onerror="window.pwned=1">"#),
            "{title}"
        );
        let message = shown("#timeline li[data-kind='item:agent_message'] .text").await;
        assert!(
            message.ends_with("\\r\nevent: error\\r\ndata: x\\u{2066}"),
            "{message:?}"
        );
        // No character anywhere on the page reorders or hides what follows it.
        let hiding = b
            .execute(
                "return /[\\p{Cf}\\u2028\\u2029\\r\\x00-\\x08\\x7f-\\x9f]/u\
                 .test(document.body.textContent + document.title)",
                json!([]),
            )
            .await;
        assert_eq!(hiding, json!(false));

        // A reason typed in the page comes back as text too.
        let reason = b.all(".approval[data-call-id='c1'] .approval-reason").await;
        b.type_into(&reason[0], &format!("no: {HTML}")).await;
        let deny = b.all(".approval[data-call-id='c1'] .deny").await;
        b.click(&deny[0]).await;
        b.wait_for(
            "#timeline li[data-kind='approval.decided']",
            "no: <img",
            WAIT,
        )
        .await;
        b.wait_for(
            "#timeline li[data-kind='item:agent_message']",
            "FINAL <img",
            WAIT,
        )
        .await;
        assert_nothing_injected(b).await;
    })
    .catch_unwind()
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_dated_out_of_range_keeps_the_timeline() {
    let Some((chromium, chromedriver)) = webdriver::installed_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.db");
    let db = format!("sqlite://{}", path.display());
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    // A queued run and a steer for it; the steer is dated past year 275760 (the journal
    // holds any i64; a browser's Date none past 8.64e15 ms).
    let o = host::out(
        agentctl(&db)
            .args([
                "submit",
                "--base-url",
                "http://127.0.0.1:9/v1",
                "--workspace",
            ])
            .arg(&ws)
            .arg("a queued run"),
    );
    assert!(o.status.success(), "{}", host::text(&o.stderr));
    let run = host::text(&o.stdout).trim().to_string();
    let o = host::out(agentctl(&db).args(["steer", &run, "STEER-FAR-FUTURE"]));
    assert!(o.status.success(), "{}", host::text(&o.stderr));
    let conn = rusqlite::Connection::open(&path).unwrap();
    let changed = conn
        .execute(
            "UPDATE journal_events SET at = 9000000000000000000 WHERE thread = ?1 AND kind = 'steer.requested'",
            [format!("run:{run}")],
        )
        .unwrap();
    assert_eq!(changed, 1);
    drop(conn);
    let served = served::serve(&db, dir.path(), &[]);

    let b = Browser::start(&chromium, &chromedriver).await;
    let outcome = std::panic::AssertUnwindSafe(async {
        b.goto(&format!("{}/?token={TOKEN}", served.base)).await;
        b.goto(&format!("{}/#/runs/{run}", served.base)).await;
        b.wait_for(
            "#timeline li[data-kind='steer.requested']",
            "STEER-FAR-FUTURE",
            WAIT,
        )
        .await;
        b.wait_for("#timeline li[data-kind='thread.started']", "", WAIT)
            .await;
    });
    let outcome = futures::FutureExt::catch_unwind(outcome).await;
    b.quit().await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// A call the model named `item_2` and the message the stream numbers `item_2` a step
/// later are two entries: the message took the command's place in the timeline (live and
/// on reload), so a command that ran vanished from the console.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_named_like_a_message_keeps_its_own_entry() {
    let Some((chromium, chromedriver)) = webdriver::installed_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("j.db").display());
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let mut first = answer("Let me look around.");
    first.as_array_mut().unwrap().push(call(
        "item_2",
        "shell",
        json!({"command": "echo COMMAND-THAT-RAN"}),
    ));
    let server = emulator(&script_by_outputs(&[
        first,
        answer("I only read README.md; nothing was changed."),
    ]))
    .await;
    let o = host::out(
        agentctl(&db)
            .args(["run", "--base-url", &server.base_url(), "--workspace"])
            .arg(&ws)
            .args(["--approval", "auto", "tidy up"]),
    );
    assert!(o.status.success(), "{}", host::text(&o.stderr));
    let run = wait_for_run(&db).await;
    let served = served::serve(&db, dir.path(), &[]);

    let b = Browser::start(&chromium, &chromedriver).await;
    let outcome = std::panic::AssertUnwindSafe(async {
        b.goto(&format!("{}/?token={TOKEN}", served.base)).await;
        b.goto(&format!("{}/#/runs/{run}", served.base)).await;
        b.wait_for(
            "#timeline li[data-kind='item:agent_message']",
            "nothing was changed",
            WAIT,
        )
        .await;
        b.wait_for(
            "#timeline li[data-kind='item:command_execution']",
            "COMMAND-THAT-RAN",
            WAIT,
        )
        .await;
    });
    let outcome = futures::FutureExt::catch_unwind(outcome).await;
    b.quit().await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}
