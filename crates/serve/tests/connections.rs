//! Keep-alive: a response after which the server closes its connection says so, so that a
//! client does not send its next request on a connection that is closing.
//!
//! Bounds: idle and half-sent connections are closed, and a flood of them cannot lock a
//! client out.
//!
//! A real server on 127.0.0.1 over an in-memory journal with one run, and a real HTTP
//! client that keeps connections alive (reqwest), or raw sockets.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may unwrap

use std::time::Duration;

use agent_serve::Limits;
use futures::StreamExt as _;
use reqwest::header::CONNECTION;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

mod common;

const TOKEN: &str = "conn-token-0123456789abcdef0123456789abcdef";

use common::Server;

async fn server() -> Server {
    common::server(TOKEN).await
}

/// An authenticated `GET /api/v1/runs` as raw HTTP/1.1 for the server at `addr`.
fn list_runs(addr: &str) -> String {
    format!("GET /api/v1/runs HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\n\r\n")
}

fn closes(resp: &reqwest::Response) -> bool {
    resp.headers()
        .get(CONNECTION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("close"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_to_a_request_whose_body_went_unread_closes_the_connection() {
    let s = server().await;
    let client = reqwest::Client::new();
    let steer = format!("{}/api/v1/runs/{}/steer", s.base, s.run);
    // Refused at the door, its body never read.
    let refused = client
        .post(&steer)
        .body(vec![b'['; 256 * 1024])
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    assert!(closes(&refused), "{:?}", refused.headers());
    // A route that takes no body, sent one anyway.
    let listed = client
        .get(format!("{}/api/v1/runs", s.base))
        .bearer_auth(TOKEN)
        .body("unread")
        .send()
        .await
        .unwrap();
    assert_eq!(listed.status(), 200);
    assert!(closes(&listed), "{:?}", listed.headers());
    // A body the route reads to its end (whatever it then answers) keeps the connection.
    let read = client
        .post(&steer)
        .bearer_auth(TOKEN)
        .json(&serde_json::json!({"text": "keep going"}))
        .send()
        .await
        .unwrap();
    assert!(read.status().as_u16() < 500, "{}", read.status());
    assert!(!closes(&read), "{:?}", read.headers());
    // So does a request with no body.
    let plain = client
        .get(format!("{}/api/v1/runs", s.base))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(plain.status(), 200);
    assert!(!closes(&plain), "{:?}", plain.headers());
}

/// What the `serve` fuzz target ran into after some thousands of cases: the request after
/// a refused one went out on the refused one's connection, which the server was closing,
/// and failed with a broken pipe or a reset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_after_a_refused_body_is_answered() {
    let s = server().await;
    let client = reqwest::Client::new();
    let steer = format!("{}/api/v1/runs/{}/steer", s.base, s.run);
    for i in 0..300 {
        let refused = client
            .post(&steer)
            .body(vec![b'['; 64 * 1024])
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), 401);
        let next = client
            .get(format!("{}/api/v1/runs", s.base))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap_or_else(|e| panic!("request {i} after a refused body: {e:?}"));
        assert_eq!(next.status(), 200);
    }
}

/// Whether the server closes `stream` within `within` (a read that ends or fails), rather
/// than keeping it open.
async fn closed_within(stream: &mut tokio::net::TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            // An answer (a refusal, a timeout response): keep reading to the close.
            Ok(Ok(_)) => {}
        }
    }
}

async fn limited(limits: Limits) -> Server {
    common::server_with(TOKEN, limits).await
}

fn addr_of(s: &Server) -> String {
    s.base.trim_start_matches("http://").to_string()
}

/// The review's `slow.py`: a connection that sent nothing and one that sent half a request
/// line were both open minutes later. Now both close once idle for the timeout; a
/// kept-alive connection after its answer closes too, after the longer keep-alive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_half_sent_connections_are_closed() {
    let s = limited(Limits {
        max_connections: 64,
        idle_timeout: Duration::from_millis(300),
        keep_alive: Duration::from_millis(2500),
        ..Limits::default()
    })
    .await;
    let addr = addr_of(&s);
    let mut silent = TcpStream::connect(&addr).await.unwrap();
    let mut half = TcpStream::connect(&addr).await.unwrap();
    half.write_all(b"GET /api/v1/runs HTTP/1.1\r\nHo")
        .await
        .unwrap();
    let mut kept = TcpStream::connect(&addr).await.unwrap();
    let request = list_runs(&addr);
    kept.write_all(request.as_bytes()).await.unwrap();
    let mut buf = [0u8; 64];
    let n = kept.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{:?}", &buf[..n]);
    for (name, stream) in [("silent", &mut silent), ("half", &mut half)] {
        assert!(
            closed_within(stream, Duration::from_secs(2)).await,
            "the {name} connection is still open"
        );
    }
    assert!(
        !closed_within(&mut kept, Duration::from_millis(300)).await,
        "a served connection was closed after the first-request timeout"
    );
    assert!(
        closed_within(&mut kept, Duration::from_secs(5)).await,
        "the kept connection is still open after its keep-alive"
    );
}

/// The serve bench's failure: a pooled client sent its next request on a connection the
/// server was closing for a 10 s idle, and the request failed (`IncompleteMessage`). A
/// connection that has been answered stays open well past the first-request timeout, and
/// answers on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_alive_connection_outlives_the_first_request_timeout() {
    let s = limited(Limits {
        max_connections: 64,
        idle_timeout: Duration::from_millis(200),
        keep_alive: Duration::from_secs(60),
        ..Limits::default()
    })
    .await;
    let addr = addr_of(&s);
    let mut kept = TcpStream::connect(&addr).await.unwrap();
    let request = list_runs(&addr);
    for round in 0..3 {
        kept.write_all(request.as_bytes()).await.unwrap();
        let mut buf = vec![0u8; 64 * 1024];
        let n = tokio::time::timeout(Duration::from_secs(5), kept.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(
            buf[..n].starts_with(b"HTTP/1.1 200"),
            "round {round}: {:?}",
            String::from_utf8_lossy(&buf[..n])
        );
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
}

/// An event stream is one request in progress for as long as it runs: the idle timeout
/// never cuts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_event_stream_outlives_the_idle_timeout() {
    let s = limited(Limits {
        max_connections: 64,
        idle_timeout: Duration::from_millis(200),
        keep_alive: Duration::from_millis(200),
        ..Limits::default()
    })
    .await;
    let client = reqwest::Client::new();
    let stream = client
        .get(format!("{}/api/v1/runs/{}/events/stream", s.base, s.run))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    let mut body = stream.bytes_stream();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let steer = reqwest::Client::new()
        .post(format!("{}/api/v1/runs/{}/steer", s.base, s.run))
        .bearer_auth(TOKEN)
        .json(&serde_json::json!({"text": "after a quiet second"}))
        .send()
        .await
        .unwrap();
    assert_eq!(steer.status(), 202);
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !seen.contains("after a quiet second") {
        match tokio::time::timeout_at(deadline, body.next()).await {
            Ok(Some(Ok(chunk))) => seen.push_str(&String::from_utf8_lossy(&chunk)),
            other => panic!("the stream ended or stalled: {other:?}; got {seen}"),
        }
    }
}

/// The review's `flood.py`: ~20k idle connections used up the file descriptors and an
/// authenticated request timed out. Past the connection limit the longest-idle connections
/// are closed, so the flood holds at most the limit and a real request gets through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_idle_connections_makes_room_for_a_real_request() {
    const MAX: usize = 8;
    let s = limited(Limits {
        max_connections: MAX,
        idle_timeout: Duration::from_secs(120),
        keep_alive: Duration::from_secs(120),
        ..Limits::default()
    })
    .await;
    let addr = addr_of(&s);
    // A client's kept-alive connection, answered once and idle since before the flood.
    let mut kept = TcpStream::connect(&addr).await.unwrap();
    let request = list_runs(&addr);
    let mut buf = vec![0u8; 64 * 1024];
    kept.write_all(request.as_bytes()).await.unwrap();
    let n = kept.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    let mut flood = Vec::new();
    for _ in 0..4 * MAX {
        flood.push(TcpStream::connect(&addr).await.unwrap());
    }
    let answer = tokio::time::timeout(
        Duration::from_secs(10),
        reqwest::Client::new()
            .get(format!("{}/api/v1/runs", s.base))
            .bearer_auth(TOKEN)
            .send(),
    )
    .await
    .expect("the request timed out behind the flood")
    .unwrap();
    assert_eq!(answer.status(), 200);
    let closed = futures::future::join_all(
        flood
            .iter_mut()
            .map(|stream| closed_within(stream, Duration::from_secs(2))),
    )
    .await;
    let open = closed.iter().filter(|c| !**c).count();
    assert!(
        open <= MAX,
        "{open} idle connections of {} still open",
        flood.len()
    );
    // The oldest of the flood went first.
    assert!(closed[0], "{closed:?}");
    // The served connection, idle the longest of all, was spared while the flood's own
    // could go: it still answers.
    kept.write_all(request.as_bytes()).await.unwrap();
    let n = tokio::time::timeout(Duration::from_secs(5), kept.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&buf[..n])
    );
}

/// The review found HTTP/2 (prior knowledge) accepted but every request refused with
/// `forbidden_host`: HTTP/2 names the server in `:authority`, not in a `Host` header. The
/// authority passes the same check as `Host` does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_requests_are_checked_by_their_authority() {
    let s = server().await;
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let listed = h2
        .get(format!("{}/api/v1/runs", s.base))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(listed.version(), reqwest::Version::HTTP_2);
    assert_eq!(listed.status(), 200, "{:?}", listed.text().await);
    // Another name in the authority is refused as another Host is.
    let port = s.base.rsplit(':').next().unwrap();
    let rebound = reqwest::Client::builder()
        .http2_prior_knowledge()
        .resolve("evil.example", format!("127.0.0.1:{port}").parse().unwrap())
        .build()
        .unwrap();
    let foreign = rebound
        .get(format!("http://evil.example:{port}/api/v1/runs"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(foreign.status(), 403);
    // An HTTP/1.1 request whose target names another server is refused, whatever its Host.
    let addr = addr_of(&s);
    let mut raw = TcpStream::connect(&addr).await.unwrap();
    let request = format!(
        "GET http://evil.example/api/v1/runs HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n"
    );
    raw.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    raw.read_to_end(&mut answer).await.unwrap();
    assert!(
        answer.starts_with(b"HTTP/1.1 403"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
}

/// The review's `slow_signin.py`: connections that sent a sign-in form's head and stalled
/// its body were requests in progress, never closed and never evicted, and enough of them
/// (no token needed) shut everyone out. A request waiting for its body is evicted as an
/// idle connection is, and the body must arrive within the body timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_request_bodies_cannot_lock_a_client_out() {
    const MAX: usize = 8;
    let s = limited(Limits {
        max_connections: MAX,
        idle_timeout: Duration::from_secs(120),
        keep_alive: Duration::from_secs(120),
        body_timeout: Duration::from_secs(2),
    })
    .await;
    let addr = addr_of(&s);
    let mut stalled = Vec::new();
    for _ in 0..4 * MAX {
        let mut stream = TcpStream::connect(&addr).await.unwrap();
        let head = format!(
            "POST / HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\ntok"
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        stalled.push(stream);
    }
    let started = tokio::time::Instant::now();
    // Well within the body timeout: answered because stalled requests make room.
    let answer = tokio::time::timeout(
        Duration::from_secs(1),
        reqwest::Client::new()
            .get(format!("{}/api/v1/runs", s.base))
            .bearer_auth(TOKEN)
            .send(),
    )
    .await
    .expect("the request timed out behind the stalled bodies")
    .expect("the request was refused behind the stalled bodies");
    assert_eq!(answer.status(), 200);
    // Every stalled connection is closed once the body timeout (and the close grace) is
    // past, evicted or not.
    let closed = futures::future::join_all(
        stalled
            .iter_mut()
            .map(|stream| closed_within(stream, Duration::from_secs(5))),
    )
    .await;
    assert!(closed.iter().all(|c| *c), "{closed:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// A sign-in form is a token: one that says it is larger than a few KiB is refused at
/// once (`413`), its body unread and its connection closed, rather than read for a token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_sign_in_form_is_refused_before_it_is_read() {
    let s = server().await;
    let addr = addr_of(&s);
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "POST / HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100000\r\n\r\ntoken="
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(3), stream.read_to_end(&mut answer))
        .await
        .expect("a large sign-in form was waited for")
        .unwrap();
    assert!(
        answer.starts_with(b"HTTP/1.1 413"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    // A chunked form that runs past the cap is cut off with a 413 too.
    let client = reqwest::Client::new();
    let chunks = futures::stream::iter((0..8).map(|_| Ok::<_, std::io::Error>(vec![b'a'; 1024])));
    let chunked = client
        .post(&s.base)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await
        .unwrap();
    assert_eq!(chunked.status(), 413);
    // The right token still signs in.
    let signed = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .post(&s.base)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(signed.status(), 303);
}

/// One raw HTTP/1.1 request (`head`: its request line and headers, each ending in CRLF)
/// with `body`; the status line's code.
async fn raw_status(base: &str, head: &str, body: &str) -> String {
    let addr = base.trim_start_matches("http://").to_string();
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    let request = format!(
        "{head}Connection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
        .await
        .unwrap()
        .unwrap();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    answer
        .split(' ')
        .nth(1)
        .unwrap_or_else(|| panic!("no status in {answer:?}"))
        .to_string()
}

/// A request with two `Host` headers is refused whatever their order (the first one alone
/// was judged: this server's name first let a foreign one through), and a POST with two
/// `Origin` headers is refused as a cross-site one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hosts_or_two_origins_are_refused() {
    let s = server().await;
    let host = s.base.trim_start_matches("http://").to_string();
    let auth = format!("Authorization: Bearer {TOKEN}\r\n");
    for (first, second) in [
        (host.as_str(), "evil.example"),
        ("evil.example", host.as_str()),
    ] {
        let head =
            format!("GET /api/v1/runs HTTP/1.1\r\nHost: {first}\r\nHost: {second}\r\n{auth}");
        assert_eq!(
            raw_status(&s.base, &head, "").await,
            "400",
            "{first}, {second}"
        );
    }
    let one = format!("GET /api/v1/runs HTTP/1.1\r\nHost: {host}\r\n{auth}");
    assert_eq!(raw_status(&s.base, &one, "").await, "200");
    let steer = |origins: &str| {
        format!(
            "POST /api/v1/runs/{}/steer HTTP/1.1\r\nHost: {host}\r\n{auth}{origins}\
             Content-Type: application/json\r\n",
            s.run
        )
    };
    let body = r#"{"text":"x"}"#;
    let two = steer(&format!(
        "Origin: http://{host}\r\nOrigin: http://evil.example\r\n"
    ));
    assert_eq!(raw_status(&s.base, &two, body).await, "403");
    let own = steer(&format!("Origin: http://{host}\r\n"));
    assert_eq!(raw_status(&s.base, &own, body).await, "202");
}
