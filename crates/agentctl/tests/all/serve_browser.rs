#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may unwrap
//! The console in a real browser: Debian's headless `chromium` and `chromedriver`, driven
//! over WebDriver, against a real `agentctl serve`, a separate `agentctl worker` process
//! and the emulator. `.ci/run` installs the browser; under `CI=true` its absence fails the
//! test, elsewhere it is skipped with a message.
//!
//! Scenario: sign in through the printed link; submit a run from the page; it waits on an
//! approval, which the page shows without a reload; Approve; the tool output appears live;
//! a second approval waits: a steer typed in the page, then that approval decided from the
//! CLI; the page shows the CLI's decision, the steer applied and the final answer; a run
//! submitted from the CLI with two sub-agents lists them on its page, each linked to its
//! own; a wrong token gets the login page and no data. A screenshot of the run page is saved
//! (`target/serve-browser/run.png`) on failure and on success, and one of the parent's page
//! with its sub-agents (`children.png`).

use crate::host;
use crate::served;
use crate::webdriver;
use served::Killed;

use std::process::Stdio;
use std::time::Duration;

use serde_json::json;

use host::{agentctl, answer, call, emulator, events, script_by_outputs, text};
use webdriver::Browser;

use served::TOKEN;
const WAIT: Duration = Duration::from_secs(30);

fn shots_dir() -> std::path::PathBuf {
    let dir =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/serve-browser");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_in_a_real_browser() {
    let Some((chromium, chromedriver)) = webdriver::installed_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("j.db").display());
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let server = emulator(&with_sub_agents(&script_by_outputs(&[
        json!([call(
            "c1",
            "shell",
            json!({"command": "echo first-output-7Q"})
        )]),
        json!([call(
            "c2",
            "shell",
            json!({"command": "echo second-output-9Z"})
        )]),
        answer("FINAL: all done 4K"),
    ])))
    .await;
    let served = served::serve(&db, dir.path(), &["--base-url", &server.base_url()]);
    let base = served.base.clone();
    let worker = agentctl(&db)
        .args(["worker", "--poll", "0.1", "--lease-ttl", "5"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _worker = Killed(worker);

    let browser = Browser::start(&chromium, &chromedriver).await;
    let outcome = scenario(&browser, &base, &server.base_url(), &db, &ws).await;
    let shot = browser.screenshot().await;
    std::fs::write(shots_dir().join("run.png"), &shot).unwrap();
    if outcome.is_err() {
        std::fs::write(shots_dir().join("failure.html"), browser.source().await).unwrap();
    }
    browser.quit().await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// `script` with rules ahead of its own for a parent (`PARENT-5K`) that spawns two
/// sub-agents (`CHILD-A`, `CHILD-B`), which answer at once.
fn with_sub_agents(script: &str) -> String {
    let mut script: serde_json::Value = serde_json::from_str(script).unwrap();
    let agents = json!({"agents": [
        {"prompt": "CHILD-A: say a", "instructions": null, "tools": null},
        {"prompt": "CHILD-B: say b", "instructions": null, "tools": null}]});
    let mut rules = vec![
        json!({"when": {"last_user_contains": "CHILD-A"}, "reply": {"items": answer("A done")}}),
        json!({"when": {"last_user_contains": "CHILD-B"}, "reply": {"items": answer("B done")}}),
        json!({"when": {"last_user_contains": "PARENT-5K", "tool_outputs": 0},
            "reply": {"items": [call("call_spawn", "spawn_agents", agents)]}}),
        json!({"when": {"last_user_contains": "PARENT-5K", "tool_outputs": 1},
            "reply": {"items": answer("FINAL: {{outputs}}")}}),
    ];
    rules.extend(script["rules"].as_array().unwrap().iter().cloned());
    script["rules"] = json!(rules);
    script.to_string()
}

/// The scenario; a failure is caught so the screenshot is taken first.
async fn scenario(
    b: &Browser,
    base: &str,
    model: &str,
    db: &str,
    ws: &std::path::Path,
) -> Result<(), Box<dyn std::any::Any + Send>> {
    use futures::FutureExt as _;
    std::panic::AssertUnwindSafe(async {
        // Signed out: the login page, no data.
        b.goto(&format!("{base}/")).await;
        b.wait_for("body", "Not signed in", WAIT).await;
        // The printed link signs in and leaves the address bar.
        b.goto(&format!("{base}/?token={TOKEN}")).await;
        b.wait_for("#runs", "", WAIT).await;
        let url = b.execute("return location.href", json!([])).await;
        assert!(!url.as_str().unwrap().contains("token"), "{url}");

        // Submit a run from the page (sandbox off: every command asks).
        let new = b.all("#nav-new").await;
        b.click(&new[0]).await;
        let prompt = b.wait_for("#new-prompt", "", WAIT).await;
        b.type_into(&prompt, "say two things").await;
        let workspace = b.all("#new-workspace").await;
        b.type_into(&workspace[0], &ws.display().to_string()).await;
        b.execute(
            "const s = document.querySelector('#new-run select[name=sandbox], #new-sandbox'); \
             if (s) { s.value = 'off'; s.dispatchEvent(new Event('change')); } return !!s;",
            json!([]),
        )
        .await;
        let submit = b.all("#new-submit").await;
        b.click(&submit[0]).await;

        // The first approval appears without a reload; approve it in the page.
        let approval = b
            .wait_for(".approval[data-call-id='c1']", "echo first-output-7Q", WAIT)
            .await;
        // The submit's answer is about the run: it stays through the navigation to it.
        b.wait_for("#status", "submitted run", WAIT).await;
        let approve = b.all(".approval[data-call-id='c1'] .approve").await;
        let _ = approval;
        b.click(&approve[0]).await;
        b.wait_for(
            "#timeline li[data-kind='item:command_execution']",
            "first-output-7Q",
            WAIT,
        )
        .await;

        // The second approval waits: steer first, then decide it from the CLI.
        b.wait_for(".approval[data-call-id='c2']", "second-output-9Z", WAIT)
            .await;
        let steer = b.all("#steer-text").await;
        b.type_into(&steer[0], "keep it short 3X").await;
        let send = b.all("#steer-send").await;
        b.click(&send[0]).await;
        b.wait_for("#timeline", "keep it short 3X", WAIT).await;
        b.wait_for("#status", "steer sent", WAIT).await;
        let run = b
            .execute("return location.hash.split('/').pop()", json!([]))
            .await
            .as_str()
            .unwrap()
            .to_string();
        let o = host::out(agentctl(db).args(["approve", &run, "c2"]));
        assert!(o.status.success(), "{}", text(&o.stderr));
        b.wait_for(
            "#timeline li[data-kind='item:command_execution']",
            "second-output-9Z",
            WAIT,
        )
        .await;
        b.wait_for(
            "#timeline li[data-kind='item:agent_message']",
            "FINAL: all done 4K",
            WAIT,
        )
        .await;
        b.wait_for("#run-status", "completed", WAIT).await;
        // The steer was applied (the journal says so), and the page says it too.
        let evs = events(db, &run).await;
        assert_eq!(
            evs.iter().filter(|e| &*e.kind == "steer.applied").count(),
            1
        );
        b.wait_for("#timeline li[data-kind='steer.applied']", "", WAIT)
            .await;
        // The CLI's decision is shown as the CLI's.
        b.wait_for("#timeline li[data-kind='approval.decided']", "@", WAIT)
            .await;

        // A run with two sub-agents, submitted from the CLI: its page lists them in the
        // call's order with their status and title, each linked to its own page.
        let o = host::out(
            agentctl(db)
                .args(["submit", "--base-url", model, "--approval", "auto"])
                .args(["--sandbox", "off", "--max-children", "2", "--workspace"])
                .arg(ws)
                .arg("PARENT-5K: fan out"),
        );
        assert!(o.status.success(), "{}", text(&o.stderr));
        let parent = text(&o.stdout).trim().to_string();
        // The steer's message is still up; a navigation within the page (no reload: the
        // marker survives) to another run clears it.
        let before = b
            .execute(
                "window.sameDocument = true; return document.getElementById('status').textContent",
                json!([]),
            )
            .await;
        assert!(before.as_str().unwrap().contains("steer sent"), "{before}");
        b.goto(&format!("{base}/#/runs/{parent}")).await;
        b.wait_for("#run-status", "completed", WAIT).await;
        let after = b
            .execute(
                "return [window.sameDocument === true, document.getElementById('status').textContent]",
                json!([]),
            )
            .await;
        assert_eq!(after, json!([true, ""]));
        b.wait_for("#children-panel", "CHILD-B: say b", WAIT).await;
        let listed = b
            .execute(
                "return [...document.querySelectorAll('#children li')].map(li => \
                 [li.dataset.runId, li.querySelector('a').getAttribute('href'), li.textContent])",
                json!([]),
            )
            .await;
        let listed = listed.as_array().unwrap();
        assert_eq!(listed.len(), 2, "{listed:?}");
        for (line, tag) in listed.iter().zip(["CHILD-A: say a", "CHILD-B: say b"]) {
            let id = line[0].as_str().unwrap();
            assert_ne!(id, parent);
            assert_eq!(line[1], format!("#/runs/{id}"));
            let shown = line[2].as_str().unwrap();
            assert!(
                shown.contains("completed") && shown.contains(tag),
                "{shown}"
            );
        }
        std::fs::write(shots_dir().join("children.png"), b.screenshot().await).unwrap();
        let first = b.all("#children li a").await;
        b.click(&first[0]).await;
        let child = listed[0][0].as_str().unwrap();
        b.wait_for("#run-h1", child, WAIT).await;
        b.wait_for(
            "#timeline li[data-kind='item:agent_message']",
            "A done",
            WAIT,
        )
        .await;

        // A wrong token: the login page, and no run on it.
        b.delete_cookies().await;
        b.goto(&format!("{base}/?token=wrong")).await;
        b.wait_for("body", "Not signed in", WAIT).await;
        assert!(!b.source().await.contains(&run));
        // Back in, for the screenshot of the run page.
        b.goto(&format!("{base}/?token={TOKEN}")).await;
        b.goto(&format!("{base}/#/runs/{run}")).await;
        b.wait_for(
            "#timeline li[data-kind='item:agent_message']",
            "FINAL: all done 4K",
            WAIT,
        )
        .await;
    })
    .catch_unwind()
    .await
}
