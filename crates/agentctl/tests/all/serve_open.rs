#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may unwrap
//! `agentctl serve --open` hands the browser opener (`xdg-open`, a stand-in here that
//! records its arguments) a one-time link, not the token: every local user can read a
//! process's arguments, and the opener's and the browser's last as long as they run. The
//! link signs in once; the token stays in the printed link and the cookie only.

use crate::host;
use crate::served::{Killed, TOKEN};

use std::io::BufRead as _;
use std::process::Stdio;
use std::time::{Duration, Instant};

use reqwest::StatusCode;

use host::agentctl;

async fn get(url: &str) -> reqwest::Response {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(url)
        .send()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_gives_the_browser_a_one_time_link_not_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("j.db").display());
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    // The stand-in opener: records its arguments.
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let opened = dir.path().join("opened");
    let opener = bin.join("xdg-open");
    agent_testkit::write_executable(
        &opener,
        &format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" > '{}.tmp' && mv '{0}.tmp' '{0}'\n",
            opened.display()
        ),
    );
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut child = Killed(
        agentctl(&db)
            .args([
                "--json",
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--open",
                "--token-file",
            ])
            .arg(&token_file)
            .env("PATH", path)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    std::io::BufReader::new(child.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let listening: serde_json::Value = serde_json::from_str(&line).unwrap();
    let addr = listening["addr"].as_str().unwrap().to_string();
    let until = Instant::now() + Duration::from_secs(20);
    while !opened.exists() {
        assert!(Instant::now() < until, "xdg-open was not run");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let args = std::fs::read_to_string(&opened).unwrap();
    let link = args.trim();
    assert!(
        !args.contains(TOKEN),
        "the token was handed to the opener: {args}"
    );
    assert!(link.starts_with(&format!("http://{addr}/?code=")), "{link}");

    // The link signs a browser in (the cookie holds the token), once.
    let first = get(link).await;
    assert_eq!(first.status(), StatusCode::SEE_OTHER);
    let cookie = first.headers()["set-cookie"].to_str().unwrap().to_string();
    let port = addr.rsplit(':').next().unwrap();
    assert!(
        cookie.starts_with(&format!("agentctl_token_{port}={TOKEN};")),
        "{cookie}"
    );
    let again = get(link).await;
    assert_eq!(again.status(), StatusCode::UNAUTHORIZED);
    assert!(again.headers().get("set-cookie").is_none());
    // A made-up code signs nothing in either.
    let guessed = get(&format!("http://{addr}/?code={}", "0".repeat(64))).await;
    assert_eq!(guessed.status(), StatusCode::UNAUTHORIZED);
}
