//! SSE framing throughput: our `SseParser` against the `eventsource-stream` crate on the
//! same recorded stream, fed in 16 KiB chunks (as `cargo xtask bench responses` feeds the
//! Python SDK). Release mode: `cargo run --release -p agent-responses --example sse_compare
//! -- [FILE] [ITERATIONS] [ROUNDS]`; without FILE it records the bench's stream from the
//! emulator first (the script of `responses-mock/examples/responses_bench.rs`).
//! Prints one JSON line: medians over ROUNDS of MB/s and frames/s for each parser, and
//! whether the two produced the same frames.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a bench binary

use std::convert::Infallible;
use std::time::Instant;

use agent_responses::sse::SseParser;
use futures::StreamExt as _;
use serde_json::json;

const CHUNK: usize = 16 * 1024;

type Frame = (String, String, String);

fn ours(bytes: &[u8]) -> Vec<Frame> {
    let mut parser = SseParser::new();
    let mut frames = Vec::new();
    for chunk in bytes.chunks(CHUNK) {
        parser.push(chunk, &mut frames).unwrap();
    }
    parser.finish(&mut frames).unwrap();
    frames
        .into_iter()
        .map(|f| {
            let event = f.event.unwrap_or_else(|| "message".into());
            (event, f.data, f.id.unwrap_or_default())
        })
        .collect()
}

fn theirs(bytes: &[u8]) -> Vec<Frame> {
    let source = futures::stream::iter(bytes.chunks(CHUNK).map(Ok::<&[u8], Infallible>));
    let stream = eventsource_stream::EventStream::new(source);
    futures::executor::block_on(
        stream
            .map(|e| {
                let e = e.unwrap();
                (e.event, e.data, e.id)
            })
            .collect(),
    )
}

/// Frames per second and MB/s of `parse` over `iterations` passes.
fn measure(bytes: &[u8], iterations: usize, parse: fn(&[u8]) -> Vec<Frame>) -> (f64, f64) {
    let mut frames = 0usize;
    let start = Instant::now();
    for _ in 0..iterations {
        let out = parse(std::hint::black_box(bytes));
        frames += out.len();
        std::hint::black_box(&out);
    }
    let secs = start.elapsed().as_secs_f64();
    (
        (bytes.len() * iterations) as f64 / 1e6 / secs,
        frames as f64 / secs,
    )
}

/// The median; for an even count the mean of the two middle values (the upper one alone,
/// as before, took the faster of the two rates).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[mid],
        _ => (v[mid - 1] + v[mid]) / 2.0,
    }
}

async fn record() -> Vec<u8> {
    use agent_responses_mock::{MockConfig, MockServer, Script};
    let text: String = (0..2000)
        .map(|i| format!("句子 {i}: the quick brown fox jumps over the lazy dog. "))
        .collect();
    let args = serde_json::to_string(&json!({"module": "api", "notes": "x".repeat(4000)})).unwrap();
    let script: Script = serde_json::from_value(json!({"rules": [{"reply": {"items": [
        {"type": "reasoning", "summary": []},
        {"type": "function_call", "name": "scan", "arguments": args},
        {"type": "function_call", "name": "scan", "arguments": args},
        {"type": "message", "content": [{"type": "output_text", "text": text}]}
    ], "delta_chars": 8}}]}))
    .unwrap();
    let server = MockServer::start(MockConfig::new(script)).await.unwrap();
    reqwest::Client::new()
        .post(format!("{}/responses", server.base_url()))
        .bearer_auth("bench")
        .json(&json!({"model": "bench", "input": "go", "stream": true}))
        .send()
        .await
        .unwrap()
        .error_for_status()
        .unwrap()
        .bytes()
        .await
        .unwrap()
        .to_vec()
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let bytes = match args.first().filter(|a| !a.is_empty() && *a != "-") {
        Some(file) => std::fs::read(file).unwrap(),
        None => record().await,
    };
    let iterations: usize = args.get(1).map_or(20, |a| a.parse().unwrap());
    let rounds: usize = args.get(2).map_or(5, |a| a.parse().unwrap());
    let same = ours(&bytes) == theirs(&bytes);
    let (mut o_mb, mut o_fr, mut t_mb, mut t_fr) = (vec![], vec![], vec![], vec![]);
    for _ in 0..rounds {
        let (mb, fr) = measure(&bytes, iterations, ours);
        o_mb.push(mb);
        o_fr.push(fr);
        let (mb, fr) = measure(&bytes, iterations, theirs);
        t_mb.push(mb);
        t_fr.push(fr);
    }
    println!(
        "{}",
        json!({
            "bytes": bytes.len(),
            "frames": ours(&bytes).len(),
            "same_frames": same,
            "ours_mb_per_s": median(o_mb),
            "ours_frames_per_s": median(o_fr),
            "eventsource_stream_mb_per_s": median(t_mb),
            "eventsource_stream_frames_per_s": median(t_fr),
        })
    );
}
