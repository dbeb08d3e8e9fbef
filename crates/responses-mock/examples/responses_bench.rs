//! Benchmark driver for `cargo xtask bench responses` (release build). Prints JSON lines.
//!
//! - `record FILE`: stream a long scripted response from the emulator over HTTP and save
//!   the raw SSE bytes (the recorded stream both parsers read).
//! - `parse FILE ITERATIONS`: our incremental parser + typed event decoding over FILE, fed in
//!   16 KiB chunks; prints `mb_per_s` and `events_per_s`.
//! - `rps json|sse SECONDS CONCURRENCY`: emulator requests per second over real HTTP.

use std::time::{Duration, Instant};

use agent_responses::sse::{Decoded, SseParser, decode_frame};
use agent_responses_mock::{MockConfig, MockServer, Script};
use anyhow::{Context as _, bail};
use serde_json::json;

fn long_script() -> anyhow::Result<Script> {
    let text: String = (0..2000)
        .map(|i| format!("句子 {i}: the quick brown fox jumps over the lazy dog. "))
        .collect();
    let args = serde_json::to_string(&json!({"module": "api", "notes": "x".repeat(4000)}))?;
    Ok(serde_json::from_value(
        json!({"rules": [{"reply": {"items": [
        {"type": "reasoning", "summary": []},
        {"type": "function_call", "name": "scan", "arguments": args},
        {"type": "function_call", "name": "scan", "arguments": args},
        {"type": "message", "content": [{"type": "output_text", "text": text}]}
    ], "delta_chars": 8}}]}),
    )?)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["record", file] => record(file).await,
        ["parse", file, iterations] => parse(file, iterations.parse()?),
        ["rps", kind, seconds, concurrency] => {
            rps(kind, seconds.parse()?, concurrency.parse()?).await
        }
        _ => bail!(
            "usage: responses_bench record FILE | parse FILE N | rps json|sse SECONDS CONCURRENCY"
        ),
    }
}

async fn record(file: &str) -> anyhow::Result<()> {
    let server = MockServer::start(MockConfig::new(long_script()?)).await?;
    let bytes = reqwest::Client::new()
        .post(format!("{}/responses", server.base_url()))
        .bearer_auth("bench")
        .json(&json!({"model": "bench", "input": "go", "stream": true}))
        .send()
        .await?
        .error_for_status()?
        .bytes()
        .await?;
    std::fs::write(file, &bytes).with_context(|| format!("cannot write {file}"))?;
    println!("{}", json!({"recorded_bytes": bytes.len()}));
    Ok(())
}

fn parse(file: &str, iterations: usize) -> anyhow::Result<()> {
    let bytes = std::fs::read(file)?;
    let mut events = 0usize;
    let start = Instant::now();
    for _ in 0..iterations {
        let mut parser = SseParser::new();
        let mut frames = Vec::new();
        for chunk in bytes.chunks(16 * 1024) {
            parser.push(chunk, &mut frames)?;
            for frame in frames.drain(..) {
                if let Decoded::Event(event) = decode_frame(&frame)? {
                    std::hint::black_box(&event);
                    events += 1;
                }
            }
        }
        parser.finish(&mut frames)?;
    }
    let secs = start.elapsed().as_secs_f64();
    let mb = (bytes.len() * iterations) as f64 / 1e6;
    // Framing only (no JSON), the part the SDK's SSEDecoder does.
    let mut frames_seen = 0usize;
    let framing_start = Instant::now();
    for _ in 0..iterations {
        let mut parser = SseParser::new();
        let mut frames = Vec::new();
        for chunk in bytes.chunks(16 * 1024) {
            parser.push(chunk, &mut frames)?;
            frames_seen += frames.len();
            std::hint::black_box(&frames);
            frames.clear();
        }
        parser.finish(&mut frames)?;
    }
    let framing_secs = framing_start.elapsed().as_secs_f64();
    println!(
        "{}",
        json!({"mb_per_s": mb / secs, "events_per_s": events as f64 / secs,
        "events_per_pass": events / iterations.max(1),
        "framing_mb_per_s": mb / framing_secs, "framing_events_per_s": frames_seen as f64 / framing_secs})
    );
    Ok(())
}

async fn rps(kind: &str, seconds: f64, concurrency: usize) -> anyhow::Result<()> {
    let stream = match kind {
        "json" => false,
        "sse" => true,
        other => bail!("unknown kind {other}"),
    };
    let server = MockServer::start(MockConfig::new(Script::default())).await?;
    let url = format!("{}/responses", server.base_url());
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let client = client.clone();
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            let mut done = 0u64;
            while Instant::now() < deadline {
                let response = client
                    .post(&url)
                    .bearer_auth("bench")
                    .json(&json!({"model": "bench", "input": "hello, emulator", "stream": stream}))
                    .send()
                    .await?
                    .error_for_status()?;
                let body = response.bytes().await?;
                std::hint::black_box(&body);
                done += 1;
            }
            anyhow::Ok(done)
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += task.await??;
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{}",
        json!({"kind": kind, "requests_per_s": total as f64 / secs, "requests": total})
    );
    Ok(())
}
