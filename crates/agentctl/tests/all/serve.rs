#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may unwrap
//! `agentctl serve` end to end, on SQLite and PostgreSQL: a real server process, runs made
//! by real `agentctl run` processes against the emulator, a real HTTP client. Every route,
//! every error status, the token, Host and Origin rules, and SSE resumed from
//! `Last-Event-ID` across a server restart with nothing missed or repeated.

use crate::host;
use crate::served;

use std::time::{Duration, Instant};

use futures::StreamExt as _;
use reqwest::StatusCode;
use serde_json::{Value, json};

use served::{Served, TOKEN, serve};

use host::{
    agentctl, answer, call, emulator, events, only_run, out, run_cmd, script_by_outputs, text,
};

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

impl Served {
    fn get(&self, path: &str) -> reqwest::RequestBuilder {
        client()
            .get(format!("{}{path}", self.base))
            .bearer_auth(TOKEN)
    }

    fn post(&self, path: &str, body: Value) -> reqwest::RequestBuilder {
        client()
            .post(format!("{}{path}", self.base))
            .bearer_auth(TOKEN)
            .json(&body)
    }
}

/// The status and JSON body of a request.
async fn call_api(req: reqwest::RequestBuilder) -> (StatusCode, Value) {
    let resp = req.send().await.unwrap();
    let status = resp.status();
    let body = resp.text().await.unwrap();
    let json =
        serde_json::from_str(&body).unwrap_or_else(|_| panic!("not JSON ({status}): {body}"));
    (status, json)
}

/// An error answer: its status and code, and a message.
async fn error_of(req: reqwest::RequestBuilder) -> (StatusCode, String, String) {
    let (status, body) = call_api(req).await;
    let code = body["error"]["code"]
        .as_str()
        .unwrap_or_else(|| panic!("{body}"));
    let message = body["error"]["message"].as_str().unwrap().to_string();
    (status, code.to_string(), message)
}

/// A run that waits for the approval of one shell call (`c1`), then answers.
async fn waiting_run(db: &str) -> (agent_responses_mock::MockServer, tempfile::TempDir, String) {
    let (dir, ws) = host::workspace();
    let server = emulator(&script_by_outputs(&[
        json!([call(
            "c1",
            "shell",
            json!({"command": "echo approved > approved.txt"})
        )]),
        answer("FINAL: done"),
    ]))
    .await;
    let o = out(&mut run_cmd(db, &server, &ws, &["--sandbox", "off"]));
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    (server, dir, only_run(db))
}

/// Reads SSE messages of `resp` until one has id `until`; returns the (id, data) pairs.
async fn read_sse(resp: reqwest::Response, until: i64) -> Vec<(i64, Value)> {
    let mut stream = resp.bytes_stream();
    let mut buf = String::new();
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        while let Some(end) = buf.find("\n\n") {
            let message: String = buf.drain(..end + 2).collect();
            let mut id = None;
            let mut data = String::new();
            for line in message.lines() {
                if let Some(v) = line.strip_prefix("id:") {
                    id = v.trim().parse::<i64>().ok();
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push_str(v.trim_start());
                }
            }
            if let Some(id) = id {
                let data: Value = serde_json::from_str(&data).unwrap();
                assert_eq!(data["seq"], id);
                got.push((id, data));
                if id >= until {
                    return got;
                }
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.next()).await {
            Ok(Some(chunk)) => buf.push_str(&String::from_utf8_lossy(&chunk.unwrap())),
            Ok(None) => panic!("the stream ended before seq {until}: {got:?}"),
            Err(_) => panic!(
                "no seq {until} within 30 s; got {:?}",
                got.iter().map(|g| g.0).collect::<Vec<_>>()
            ),
        }
    }
}

async fn the_door(db: FreshDb) {
    let db = db.url();
    let dir = tempfile::tempdir().unwrap();
    let s = serve(db, dir.path(), &[]);
    let url = format!("{}/api/v1/runs", s.base);
    // No token, a wrong one: 401, no data.
    let (status, code, _) = error_of(client().get(&url)).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::UNAUTHORIZED, "unauthorized")
    );
    let (status, _, _) = error_of(client().get(&url).bearer_auth("x".repeat(TOKEN.len()))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // A forged Host (DNS rebinding) is refused even with the token.
    let (status, code, _) = error_of(
        client()
            .get(&url)
            .bearer_auth(TOKEN)
            .header("Host", "evil.example:80"),
    )
    .await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::FORBIDDEN, "forbidden_host")
    );
    // The token works; so does `localhost:PORT`.
    let (status, body) = call_api(s.get("/api/v1/runs")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["runs"], json!([]));
    let port = s.host.rsplit(':').next().unwrap();
    let (status, _) = call_api(
        s.get("/api/v1/runs")
            .header("Host", format!("localhost:{port}")),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    // A cross-site POST is refused; a cookie-authenticated POST needs an Origin.
    let (status, code, _) = error_of(
        s.post("/api/v1/runs/x/interrupt", json!({}))
            .header("Origin", "http://evil.example"),
    )
    .await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::FORBIDDEN, "forbidden_origin")
    );
    // The cookie is named for the port (browsers send cookies to every port of a host, and
    // two servers would overwrite one name); the unported name is nobody's.
    let (status, _, _) = error_of(
        client()
            .get(format!("{}/api/v1/runs", s.base))
            .header("Cookie", format!("agentctl_token={TOKEN}")),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let cookie = format!("agentctl_token_{port}={TOKEN}");
    let (status, code, _) = error_of(
        client()
            .post(format!("{}/api/v1/runs/x/interrupt", s.base))
            .header("Cookie", &cookie),
    )
    .await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::FORBIDDEN, "forbidden_origin")
    );
    // With the cookie, a POST must also say it sends JSON (a browser sends that across
    // sites only after a preflight, which is never answered).
    let (status, code, _) = error_of(
        client()
            .post(format!("{}/api/v1/runs/x/interrupt", s.base))
            .header("Cookie", &cookie)
            .header("Origin", format!("http://{}", s.host))
            .header("Content-Type", "text/plain"),
    )
    .await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
    );
    let (status, code, _) = error_of(
        client()
            .post(format!("{}/api/v1/runs/x/interrupt", s.base))
            .header("Cookie", &cookie)
            .header("Origin", format!("http://{}", s.host))
            .header("Content-Type", "application/json; charset=utf-8"),
    )
    .await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::NOT_FOUND, "not_found")
    );
    // A cookie of the same name set by a page on another port of the host (sent first,
    // with a longer path) does not hide the real one.
    let (status, _) = call_api(
        client()
            .get(format!("{}/api/v1/runs", s.base))
            .header("Cookie", format!("agentctl_token_{port}=junk; {cookie}")),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    // The console: a login page without the token, a cookie from the printed link.
    let login = client().get(format!("{}/", s.base)).send().await.unwrap();
    assert_eq!(login.status(), StatusCode::UNAUTHORIZED);
    let page = login.text().await.unwrap();
    assert!(
        page.contains("Not signed in") && !page.contains("runs"),
        "{page}"
    );
    let link = client()
        .get(format!("{}/?token={TOKEN}", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(link.status(), StatusCode::SEE_OTHER);
    let set = link.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(
        set.starts_with(&format!("agentctl_token_{port}={TOKEN};"))
            && set.contains("HttpOnly")
            && set.contains("SameSite=Strict"),
        "{set}"
    );
    let bad_link = client()
        .get(format!("{}/?token=nope", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(bad_link.status(), StatusCode::UNAUTHORIZED);
    assert!(bad_link.headers().get("set-cookie").is_none());
    let console = client()
        .get(format!("{}/", s.base))
        .header("Cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(console.status(), StatusCode::OK);
    assert!(
        console.headers()["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("'self'")
    );
    let js = client()
        .get(format!("{}/assets/app.js", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(js.status(), StatusCode::OK);
    // Unknown routes and oversized bodies are JSON errors too.
    let (status, code, _) = error_of(s.get("/api/v1/nothing")).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::NOT_FOUND, "not_found")
    );
    let big = "x".repeat(2 << 20);
    let (status, code, _) = error_of(
        client()
            .post(format!("{}/api/v1/runs/x/steer", s.base))
            .bearer_auth(TOKEN)
            .header("Content-Type", "application/json")
            .body(format!("{{\"text\":\"{big}\"}}")),
    )
    .await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::PAYLOAD_TOO_LARGE, "too_large")
    );

    // A non-loopback address without --token-file is refused at start.
    let o = out(agentctl(db).args(["serve", "--listen", "0.0.0.0:0"]));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("--token-file"));
}

async fn runs_approvals_and_errors(db: FreshDb) {
    let db = db.url();
    let (server, dir, run) = waiting_run(db).await;
    let s = serve(db, dir.path(), &[]);
    let (status, body) = call_api(s.get("/api/v1/runs")).await;
    assert_eq!(status, StatusCode::OK);
    let row = &body["runs"][0];
    assert_eq!(row["run_id"], run.as_str());
    assert_eq!(row["status"], "waiting");
    assert_eq!(row["pending_approvals"], 1);
    assert_eq!(row["model"], "gpt-5.1");
    assert!(row["updated_at"].as_i64().unwrap() >= row["created_at"].as_i64().unwrap());
    let (_, body) = call_api(s.get("/api/v1/runs?status=completed")).await;
    assert_eq!(body["runs"], json!([]));
    let (status, code, msg) = error_of(s.get("/api/v1/runs?status=nope")).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::BAD_REQUEST, "bad_request")
    );
    assert!(msg.contains("status"), "{msg}");

    let (status, view) = call_api(s.get(&format!("/api/v1/runs/{run}"))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(view["type"], "run.show");
    let pending = &view["pending_approvals"][0];
    assert_eq!(pending["call_id"], "c1");
    let sha = pending["args_sha256"].as_str().unwrap().to_string();
    let (status, code, _) =
        error_of(s.get("/api/v1/runs/01a00000-0000-7000-8000-000000000000")).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::NOT_FOUND, "not_found")
    );

    let (status, page) = call_api(s.get(&format!("/api/v1/runs/{run}/events?limit=2"))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(page["events"].as_array().unwrap().len(), 2);
    assert_eq!(page["more"], true);
    let after = page["last_seq"].as_i64().unwrap();
    let (_, rest) = call_api(s.get(&format!("/api/v1/runs/{run}/events?after={after}"))).await;
    let kinds: Vec<&str> = rest["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert!(kinds.contains(&"approval.requested"), "{kinds:?}");
    let lines: Vec<&Value> = rest["events"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|e| e["lines"].as_array().unwrap())
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l["type"] == "approval.requested" && l["args_sha256"] == sha.as_str())
    );

    // Decisions: malformed bodies name the field; the hash must match; unknown calls 404.
    let path = format!("/api/v1/runs/{run}/approvals/c1");
    let (status, code, msg) = error_of(
        client()
            .post(format!("{}{path}", s.base))
            .bearer_auth(TOKEN)
            .header("Content-Type", "application/json")
            .body("{not json"),
    )
    .await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::BAD_REQUEST, "bad_request"),
        "{msg}"
    );
    let (status, _, msg) = error_of(s.post(&path, json!({"sha256": sha}))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(msg.contains("decision"), "{msg}");
    let (status, _, msg) = error_of(s.post(&path, json!({"decision": "maybe"}))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{msg}");
    let (status, code, _) =
        error_of(s.post(&path, json!({"decision": "approve", "sha256": "00"}))).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::BAD_REQUEST, "invalid")
    );
    let (status, code, _) = error_of(s.post(
        &format!("/api/v1/runs/{run}/approvals/nope"),
        json!({"decision": "approve"}),
    ))
    .await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::NOT_FOUND, "not_found")
    );
    let (status, body) = call_api(s.post(
        &path,
        json!({"decision": "approve", "sha256": sha, "reason": "looks right"}),
    ))
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body["by"].as_str().unwrap().starts_with("serve@"));
    // The CLI comes second and is told who was first; so is a second page.
    let o = out(agentctl(db).args(["deny", &run, "c1"]));
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("serve@"), "{}", text(&o.stderr));
    let (status, body) = call_api(s.post(&path, json!({"decision": "deny"}))).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "already_decided");
    assert_eq!(body["error"]["decided"]["decision"], "approve");
    assert_eq!(body["error"]["decided"]["reason"], "looks right", "{body}");
    assert!(
        body["error"]["decided"]["by"]
            .as_str()
            .unwrap()
            .starts_with("serve@")
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("serve@")
    );

    // Steers: empty is invalid; one before the resume is applied by it.
    let steer = format!("/api/v1/runs/{run}/steer");
    let (status, code, _) = error_of(s.post(&steer, json!({"text": "  "}))).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::BAD_REQUEST, "invalid")
    );
    let (status, body) = call_api(s.post(&steer, json!({"text": "mind the staging db"}))).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    // Interrupting a run nobody drives is a conflict.
    let (status, code, _) =
        error_of(s.post(&format!("/api/v1/runs/{run}/interrupt"), json!({}))).await;
    assert_eq!((status, code.as_str()), (StatusCode::CONFLICT, "conflict"));

    let o = out(&mut host::resume_cmd(db, &server, &run, &[]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let (_, view) = call_api(s.get(&format!("/api/v1/runs/{run}"))).await;
    assert_eq!(view["status"], "completed");
    assert_eq!(view["final_text"], "FINAL: done");
    let evs = events(db, &run).await;
    assert_eq!(
        evs.iter().filter(|e| &*e.kind == "steer.applied").count(),
        1
    );
    // A completed run takes no steer (it would only be dropped)...
    let (status, code, msg) = error_of(s.post(&steer, json!({"text": "too late"}))).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::CONFLICT, "conflict"),
        "{msg}"
    );
    // ...and cannot be offered again.
    let (status, code, _) =
        error_of(s.post(&format!("/api/v1/runs/{run}/resume"), json!({}))).await;
    assert_eq!((status, code.as_str()), (StatusCode::CONFLICT, "conflict"));
    // Search finds what the run did.
    let (status, body) = call_api(s.get("/api/v1/search?q=approved")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(
        body["hits"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h["run_id"] == run.as_str()),
        "{body}"
    );
    // The hit's fields are the documented ones; a limit of 0 counts as 1, as elsewhere.
    let (status, body) = call_api(s.get("/api/v1/search?q=approved&limit=0")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let hits = body["hits"].as_array().unwrap();
    assert_eq!(hits.len(), 1, "{body}");
    for field in ["run_id", "step", "kind", "unit", "snippet"] {
        assert!(hits[0].get(field).is_some(), "{field}: {body}");
    }
    let (status, _, _) = error_of(s.get("/api/v1/search?q=")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // A term the context store refuses (a NUL; over 1024 bytes) is the client's mistake, a
    // 400 naming `q`, not a 500.
    let long = "a".repeat(1025);
    for q in ["appro%00ved", long.as_str()] {
        let (status, code, msg) = error_of(s.get(&format!("/api/v1/search?q={q}"))).await;
        assert_eq!(
            (status, code.as_str()),
            (StatusCode::BAD_REQUEST, "bad_request"),
            "{msg}"
        );
        assert!(msg.starts_with("q:"), "{msg}");
    }
    // 1024 bytes is still a term.
    let (status, body) = call_api(s.get(&format!("/api/v1/search?q={}", &long[1..]))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// A stream read in two halves from two server processes, the second resumed from the
/// first's last `id` (`Last-Event-ID`): together every event once, in order, live ones too.
async fn sse_resumes_across_a_restart(db: FreshDb) {
    let db = db.url();
    let (server, dir, run) = waiting_run(db).await;
    let before = events(db, &run).await;
    let all: Vec<i64> = before.iter().map(|e| e.seq).collect();
    let half = all[all.len() / 2];
    let first = serve(db, dir.path(), &[]);
    let resp = first
        .get(&format!("/api/v1/runs/{run}/events/stream"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let part1 = read_sse(resp, half).await;
    drop(first);

    let second = serve(db, dir.path(), &[]);
    let resp = second
        .get(&format!("/api/v1/runs/{run}/events/stream"))
        .header("Last-Event-ID", half.to_string())
        .send()
        .await
        .unwrap();
    // Decide and resume while the stream is open: the new events arrive live.
    let (status, _) = call_api(second.post(
        &format!("/api/v1/runs/{run}/approvals/c1"),
        json!({"decision": "approve"}),
    ))
    .await;
    assert_eq!(status, StatusCode::OK);
    let o = out(&mut host::resume_cmd(db, &server, &run, &[]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let now = events(db, &run).await;
    let last = now.last().unwrap().seq;
    let part2 = read_sse(resp, last).await;
    let seen: Vec<i64> = part1.iter().chain(&part2).map(|(id, _)| *id).collect();
    let want: Vec<i64> = now.iter().map(|e| e.seq).collect();
    assert_eq!(seen, want, "missed or repeated events");
    // The lines are the `--json` ones, the later ones converted with the earlier in mind.
    let lines: Vec<&Value> = part2
        .iter()
        .flat_map(|(_, d)| d["lines"].as_array().unwrap())
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l["type"] == "item.completed" && l["item"]["type"] == "command_execution")
    );
    assert!(lines.iter().any(|l| l["type"] == "turn.completed"));
    // A bounded number of watchers.
    let third = serve(db, dir.path(), &["--max-watchers", "1"]);
    let held = third
        .get(&format!("/api/v1/runs/{run}/events/stream"))
        .send()
        .await
        .unwrap();
    assert_eq!(held.status(), StatusCode::OK);
    let (status, code, _) = error_of(third.get(&format!("/api/v1/runs/{run}/events/stream"))).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::TOO_MANY_REQUESTS, "too_many_watchers")
    );
    drop(held);
}

/// The events of a run paged with any limit are the events of one unpaged read and of the
/// event stream, read whole or resumed from `Last-Event-ID`: a page that goes on with the
/// converter an earlier reader left converts as a reader from the first event does.
async fn pages_of_any_size_agree_with_one_read_and_the_stream(db: FreshDb) {
    let db = db.url();
    let (dir, ws) = host::workspace();
    let mut steps: Vec<Value> = (0..8)
        .map(|i| {
            json!([
                {"type": "message", "role": "assistant",
                 "content": [{"type": "output_text", "text": format!("step {i}")}]},
                call(&format!("c{i}"), "shell", json!({"command": format!("echo {i}")}))
            ])
        })
        .collect();
    steps.push(answer("FINAL: done"));
    let server = emulator(&script_by_outputs(&steps)).await;
    let o = out(&mut run_cmd(
        db,
        &server,
        &ws,
        &["--sandbox", "off", "--approval", "auto"],
    ));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let run = only_run(db);
    let s = serve(db, dir.path(), &[]);
    let events = |after: i64, limit: usize| {
        s.get(&format!(
            "/api/v1/runs/{run}/events?after={after}&limit={limit}"
        ))
    };
    let (status, whole) = call_api(events(0, 5000)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(whole["more"], false);
    let whole = whole["events"].as_array().unwrap().clone();
    let shown = serde_json::to_string(&whole).unwrap();
    assert!(shown.contains("command_execution"), "{shown}");
    for limit in [1, 2, 3, 5, 8, 13, 40] {
        let mut after = 0;
        let mut pages = Vec::new();
        loop {
            let (status, page) = call_api(events(after, limit)).await;
            assert_eq!(status, StatusCode::OK, "{page}");
            pages.extend(page["events"].as_array().unwrap().iter().cloned());
            after = page["last_seq"].as_i64().unwrap();
            if page["more"] != true {
                break;
            }
        }
        assert_eq!(pages, whole, "pages of {limit}");
    }
    let stream = format!("/api/v1/runs/{run}/events/stream");
    let last = whole.last().unwrap()["seq"].as_i64().unwrap();
    let streamed: Vec<Value> = read_sse(s.get(&stream).send().await.unwrap(), last)
        .await
        .into_iter()
        .map(|(_, data)| data)
        .collect();
    assert_eq!(streamed, whole, "the stream");
    for cut in [1, whole.len() / 3, whole.len() / 2] {
        let from = whole[cut - 1]["seq"].as_i64().unwrap();
        let resp = s
            .get(&stream)
            .header("Last-Event-ID", from.to_string())
            .send()
            .await
            .unwrap();
        let rest: Vec<Value> = read_sse(resp, last)
            .await
            .into_iter()
            .map(|(_, data)| data)
            .collect();
        assert_eq!(rest, whole[cut..].to_vec(), "the stream after {from}");
    }
}

/// A run's view is read from its latest checkpoint on, and is the view a fold of all its
/// events gives: a corrupt event before the checkpoint (a file edited by hand), which a
/// full fold fails on, is never read by `GET /runs/{id}`, and the view is what
/// `runs show` showed before the edit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_view_is_read_from_its_latest_checkpoint_and_is_a_whole_folds() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.db");
    let db = format!("sqlite://{}", path.display());
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("README.md"), "# A workspace\n").unwrap();
    let o = out(agentctl(&db)
        .args(["run", "--mock", "--compact-at", "1", "--workspace"])
        .arg(&ws)
        .arg("look around and summarise"));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let run = only_run(&db);
    let show = || out(agentctl(&db).args(["--json", "runs", "show", &run]));
    let o = show();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let mut whole: Value = serde_json::from_str(text(&o.stdout).trim()).unwrap();
    whole.as_object_mut().unwrap().remove("age_seconds");
    assert_eq!(whole["steps"], 5, "{whole}");
    // The fold from the checkpoint shows what the fold of every event shows: the view and
    // what a row of the runs table keeps.
    {
        let journal = agent_journal::Journal::open(&db).await.unwrap();
        let full = agent_host::run::load(&journal, &run).await.unwrap();
        let latest = agent_host::run::table::load_for_view(&journal, &run)
            .await
            .unwrap();
        assert!(
            latest.steps().len() < full.steps().len(),
            "a checkpoint was read"
        );
        let view =
            |s: &agent_host::run::RunState| agent_host::run::view::RunView::of(s, s.status(), 0);
        assert_eq!(view(&latest), view(&full));
        assert_eq!(latest.created_at(), full.created_at());
        assert_eq!(latest.updated_at(), full.updated_at());
        assert_eq!(latest.last_seq(), full.last_seq());
        assert_eq!(latest.driver(), full.driver());
        assert_eq!(latest.children(), full.children());
        journal.close().await;
    }
    // The first step's event, before every checkpoint, edited into no JSON.
    let conn = rusqlite::Connection::open(&path).unwrap();
    let changed = conn
        .execute(
            "UPDATE journal_events SET payload = '{not json' WHERE seq = \
             (SELECT MIN(seq) FROM journal_events WHERE kind = 'model.completed')",
            [],
        )
        .unwrap();
    assert_eq!(changed, 1);
    drop(conn);
    assert!(
        !show().status.success(),
        "a full fold reads the edited event"
    );
    let s = serve(&db, dir.path(), &[]);
    let (status, mut view) = call_api(s.get(&format!("/api/v1/runs/{run}"))).await;
    assert_eq!(status, StatusCode::OK, "{view}");
    let added = view.as_object_mut().unwrap();
    added.remove("age_seconds");
    assert_eq!(added.remove("prompt").unwrap(), "look around and summarise");
    assert!(added.remove("last_seq").unwrap().as_i64().unwrap() > 0);
    assert_eq!(view, whole);
}

/// `POST /runs` submits; a worker in the server drives it; `POST /resume` offers a paused
/// run again with a new budget and that worker finishes it.
async fn submit_and_resume_with_an_in_process_worker(db: FreshDb) {
    let db = db.url();
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let server = emulator(&script_by_outputs(&[
        json!([call(
            "c1",
            "shell",
            json!({"command": "echo one >> log.txt"})
        )]),
        json!([call(
            "c2",
            "shell",
            json!({"command": "echo two >> log.txt"})
        )]),
        answer("FINAL: done"),
    ]))
    .await;
    let s = serve(
        db,
        dir.path(),
        &["--worker", "2", "--base-url", &server.base_url()],
    );
    let (status, _, msg) = error_of(s.post("/api/v1/runs", json!({"workspace": ws}))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(msg.contains("prompt"), "{msg}");
    let (status, _, msg) =
        error_of(s.post("/api/v1/runs", json!({"prompt": "p", "workspace": "rel"}))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(msg.contains("workspace"), "{msg}");
    let (status, body) = call_api(s.post(
        "/api/v1/runs",
        json!({"prompt": "log two lines", "workspace": ws, "max_steps": 1}),
    ))
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let run = body["run_id"].as_str().unwrap().to_string();
    let wait_status = |want: &'static str| {
        let s = &s;
        let run = run.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let (_, view) = call_api(s.get(&format!("/api/v1/runs/{run}"))).await;
                if view["status"] == want {
                    return view;
                }
                assert!(Instant::now() < deadline, "never {want}: {view}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let paused = wait_status("paused").await;
    assert_eq!(
        paused["detail"].as_str().map(|d| d.contains("step")),
        Some(true),
        "{paused}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("log.txt")).unwrap(),
        "one\n"
    );
    // Without a higher budget it would pause again at once: refused, nothing queued.
    let (status, code, said) =
        error_of(s.post(&format!("/api/v1/runs/{run}/resume"), json!({}))).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::BAD_REQUEST, "invalid"),
        "{said}"
    );
    let (status, code, _) = error_of(s.post(
        &format!("/api/v1/runs/{run}/resume"),
        json!({"max_steps": 1}),
    ))
    .await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::BAD_REQUEST, "invalid")
    );
    let (status, _) = call_api(s.post(
        &format!("/api/v1/runs/{run}/resume"),
        json!({"max_steps": 5}),
    ))
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let done = wait_status("completed").await;
    assert_eq!(done["final_text"], "FINAL: done");
    assert_eq!(
        std::fs::read_to_string(ws.join("log.txt")).unwrap(),
        "one\ntwo\n"
    );
    let evs = events(db, &run).await;
    assert_eq!(evs.iter().filter(|e| &*e.kind == "run.requeued").count(), 1);
}

/// The in-process worker drives a run with the endpoint the run recorded, and uses
/// `serve`'s own only for the runs submitted there: a console over a shared database,
/// started with another endpoint (`--mock`, say), must not answer other users' runs.
async fn the_in_process_worker_drives_a_run_where_it_recorded(db: FreshDb) {
    let db = db.url();
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let recorded = emulator(&script_by_outputs(&[answer(
        "FINAL: from the recorded one",
    )]))
    .await;
    let served = emulator(&script_by_outputs(&[answer("FINAL: from serve's own")])).await;
    let o = out(agentctl(db)
        .args([
            "--json",
            "submit",
            "--base-url",
            &recorded.base_url(),
            "--workspace",
        ])
        .arg(&ws)
        .arg("elsewhere"));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let elsewhere: Value = serde_json::from_str(text(&o.stdout).trim()).unwrap();
    let elsewhere = elsewhere["run_id"].as_str().unwrap().to_string();
    let s = serve(
        db,
        dir.path(),
        &["--worker", "1", "--base-url", &served.base_url()],
    );
    let (status, body) =
        call_api(s.post("/api/v1/runs", json!({"prompt": "here", "workspace": ws}))).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let here = body["run_id"].as_str().unwrap().to_string();
    for (run, want) in [
        (&elsewhere, "FINAL: from the recorded one"),
        (&here, "FINAL: from serve's own"),
    ] {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (_, view) = call_api(s.get(&format!("/api/v1/runs/{run}"))).await;
            if view["status"] == "completed" {
                assert_eq!(view["final_text"], want, "{view}");
                break;
            }
            assert!(Instant::now() < deadline, "never completed: {view}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert_eq!(recorded.requests().len(), 1);
    assert_eq!(served.requests().len(), 1);
}

use crate::host::fresh_db::{self, FreshDb};
agent_testkit::backend_tests!(fresh_db, [sqlite, postgres]: the_door, runs_approvals_and_errors, sse_resumes_across_a_restart, pages_of_any_size_agree_with_one_read_and_the_stream, submit_and_resume_with_an_in_process_worker, the_in_process_worker_drives_a_run_where_it_recorded);

/// An endpoint no client can use (`--base-url` that is no http(s) URL, a `--mock-script`
/// that cannot be read) is refused at start, exit 2, as `submit` refuses it: the server
/// started and recorded it in every run submitted through it, for a worker to refuse.
#[test]
fn serve_refuses_an_endpoint_no_run_could_use() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("e.db").display());
    let missing = dir.path().join("missing.json");
    let missing = missing.to_str().unwrap();
    for (args, says) in [
        (&["--base-url", "not a url"][..], "invalid base URL"),
        (&["--mock", "--mock-script", missing], "--mock-script"),
    ] {
        let o = host::out_within(
            agentctl(&db)
                .args(["serve", "--listen", "127.0.0.1:0"])
                .args(args),
            Duration::from_secs(30),
        );
        let stderr = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

/// Waits up to `within` for `child` to exit.
fn exited_within(child: &mut std::process::Child, within: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "still running after {within:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `serve --worker` stopped by `sig` while its worker drives a run: the server exits 0 and
/// the worker gives the run back (queued, claimable at once), whichever signal it was.
async fn a_signal_stops_serve_and_its_worker_gives_the_run_back(sig: &str) {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("s.db").display());
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let server = emulator(&script_by_outputs(&[
        json!([call("c1", "shell", json!({"command": "sleep 2"}))]),
        answer("FINAL: done"),
    ]))
    .await;
    let mut s = serve(
        &db,
        dir.path(),
        &["--worker", "1", "--base-url", &server.base_url()],
    );
    let (status, body) =
        call_api(s.post("/api/v1/runs", json!({"prompt": "sleep", "workspace": ws}))).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let run = body["run_id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, view) = call_api(s.get(&format!("/api/v1/runs/{run}"))).await;
        if view["status"] == "running" {
            break;
        }
        assert!(Instant::now() < deadline, "never running: {view}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let killed = std::process::Command::new("kill")
        .args([format!("-{sig}"), s.child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let exited = exited_within(&mut s.child, Duration::from_secs(20));
    assert!(exited.success(), "SIG{sig}: serve exited with {exited}");
    let o = out(agentctl(&db).args(["--json", "runs", "list"]));
    let rows: Vec<Value> = text(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let row = rows.iter().find(|r| r["run_id"] == run.as_str()).unwrap();
    assert_eq!(row["status"], "queued", "SIG{sig}: {row}");
    assert_eq!(row["claimable"], true, "SIG{sig}: {row}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_stops_serve_and_its_worker_gives_the_run_back() {
    a_signal_stops_serve_and_its_worker_gives_the_run_back("INT").await;
}

/// The review: SIGTERM (what `kill`, systemd and container runtimes send) killed the
/// process as a crash, leaving the run leased to a worker that was gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_serve_and_its_worker_gives_the_run_back() {
    a_signal_stops_serve_and_its_worker_gives_the_run_back("TERM").await;
}

/// The review: a workspace that is a regular file was `bad_request` (its configuration
/// could not be read); a workspace that is no existing directory is `invalid`, as the
/// docs say.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_that_is_no_directory_is_invalid() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("w.db").display());
    let file = dir.path().join("a-file");
    std::fs::write(&file, "not a directory").unwrap();
    let s = serve(&db, dir.path(), &["--mock"]);
    for workspace in [file.clone(), dir.path().join("missing")] {
        let (status, code, msg) = error_of(s.post(
            "/api/v1/runs",
            json!({"prompt": "p", "workspace": workspace}),
        ))
        .await;
        assert_eq!(
            (status, code.as_str()),
            (StatusCode::BAD_REQUEST, "invalid"),
            "{workspace:?}: {msg}"
        );
        assert!(msg.starts_with("workspace:"), "{msg}");
    }
}

/// The review: under an open-file limit below the connection cap, new clients hung in the
/// listen backlog (the accept loop waited for a descriptor forever). The caps now fit the
/// limit: event streams past them get `429` (or a closed connection), and a plain request
/// is answered at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_low_open_file_limit_refuses_streams_rather_than_hanging_clients() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("f.db").display());
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let s = served::serve_after("ulimit -n 128", &db, dir.path(), &["--mock"]);
    let (status, body) =
        call_api(s.post("/api/v1/runs", json!({"prompt": "p", "workspace": ws}))).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let run = body["run_id"].as_str().unwrap().to_string();
    let request = format!(
        "GET /api/v1/runs/{run}/events/stream HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {TOKEN}\r\n\r\n",
        s.host
    );
    let mut streams = Vec::new();
    for _ in 0..200 {
        let Ok(mut stream) = tokio::net::TcpStream::connect(&s.host).await else {
            continue;
        };
        if stream.write_all(request.as_bytes()).await.is_ok() {
            streams.push(stream);
        }
    }
    let (mut live, mut refused, mut closed, mut silent) = (0, 0, 0, 0);
    for stream in &mut streams {
        let mut buf = [0u8; 16];
        match tokio::time::timeout(Duration::from_secs(3), stream.read(&mut buf)).await {
            Ok(Ok(n)) if buf[..n].starts_with(b"HTTP/1.1 200") => live += 1,
            Ok(Ok(n)) if buf[..n].starts_with(b"HTTP/1.1 429") => refused += 1,
            Ok(_) => closed += 1,
            Err(_) => silent += 1,
        }
    }
    assert_eq!(silent, 0, "{live} live, {refused} 429, {closed} closed");
    assert!((1..128).contains(&live), "{live} live streams");
    assert!(
        refused + closed > 0,
        "{live} live, {refused} 429, {closed} closed"
    );
    let started = Instant::now();
    let (status, body) =
        tokio::time::timeout(Duration::from_secs(5), call_api(s.get("/api/v1/runs")))
            .await
            .expect("a plain request hung behind the streams");
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(started.elapsed() < Duration::from_secs(5));
    drop(streams);
}
