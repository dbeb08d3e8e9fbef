//! `cargo xtask bench responses`: SSE parse throughput of our parser against the official
//! Python SDK's `SSEDecoder` and against the `eventsource-stream` crate on the same recorded
//! stream, and emulator requests/s.

use std::process::Command;

use anyhow::Context as _;
use serde_json::Value;

use super::{BenchCtx, Section, median};
use crate::process::{cargo, output, workspace_root};

const PARSE_ITERATIONS: &str = "20";
const RPS_SECONDS: &str = "3";
const RPS_CONCURRENCY: &str = "8";

/// The SDK's parser as the SDK's `Stream` uses it: `SSEDecoder.iter_bytes` then `json.loads`
/// of each event's data (the pydantic model construction the SDK adds is not counted, which
/// favours Python).
const PYTHON_PARSE: &str = r#"
import json, sys, time
from openai._streaming import SSEDecoder
from openai._models import construct_type
from openai.types.responses import ResponseStreamEvent
data = open(sys.argv[1], "rb").read()
iterations = int(sys.argv[2])
chunks = [data[i:i + 16384] for i in range(0, len(data), 16384)]
mb = len(data) * iterations / 1e6
out = {}
for mode in ("framing", "json", "typed"):
    events = 0
    start = time.perf_counter()
    for _ in range(iterations):
        for sse in SSEDecoder().iter_bytes(iter(chunks)):
            if sse.data.startswith("[DONE]"):
                continue
            if mode != "framing":
                value = json.loads(sse.data)
                if mode == "typed":
                    construct_type(type_=ResponseStreamEvent, value=value)
            events += 1
    secs = time.perf_counter() - start
    out[mode + "_mb_per_s"] = mb / secs
    out[mode + "_events_per_s"] = events / secs
print(json.dumps(out))
"#;

pub fn run(ctx: &BenchCtx) -> anyhow::Result<Section> {
    let python = crate::interop::openai_venv()?;
    let sdk_version =
        output(Command::new(&python).args(["-c", "import openai; print(openai.__version__)"]))?;
    crate::process::run(cargo().args([
        "build",
        "--release",
        "-j2",
        "-p",
        "agent-responses-mock",
        "--example",
        "responses_bench",
    ]))?;
    crate::process::run(cargo().args([
        "build",
        "--release",
        "-j2",
        "-p",
        "agent-responses",
        "--example",
        "sse_compare",
    ]))?;
    let target = std::env::var("CARGO_TARGET_DIR")
        .map_or_else(|_| workspace_root().join("target"), Into::into);
    let examples = target.join("release").join("examples");
    let bin = examples.join("responses_bench");
    let compare = examples.join("sse_compare");
    let scratch =
        std::env::temp_dir().join(format!("agentctl-bench-responses-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let recorded = scratch.join("stream.sse");
    let recorded_str = recorded.to_str().context("temp path is not UTF-8")?;
    let info = json_line(&output(Command::new(&bin).args(["record", recorded_str]))?)?;
    let bytes = info["recorded_bytes"].as_f64().unwrap_or(0.0);

    let (mut ours_mb, mut ours_ev, mut py_mb, mut py_ev) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut ours_fr_mb, mut ours_fr_ev, mut py_fr_mb, mut py_fr_ev) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut py_ty_mb, mut py_ty_ev) = (Vec::new(), Vec::new());
    let (mut cmp_ours_mb, mut cmp_ours_fr, mut es_mb, mut es_fr) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut same_frames = true;
    let mut events_per_pass = 0.0;
    for round in 0..ctx.runs {
        eprintln!(
            "[responses] round {}/{}: parse (ours, then Python SDK)",
            round + 1,
            ctx.runs
        );
        let ours = json_line(&output(Command::new(&bin).args([
            "parse",
            recorded_str,
            PARSE_ITERATIONS,
        ]))?)?;
        ours_mb.push(number(&ours, "mb_per_s")?);
        ours_ev.push(number(&ours, "events_per_s")?);
        events_per_pass = number(&ours, "events_per_pass")?;
        ours_fr_mb.push(number(&ours, "framing_mb_per_s")?);
        ours_fr_ev.push(number(&ours, "framing_events_per_s")?);
        let py = json_line(&output(Command::new(&python).args([
            "-c",
            PYTHON_PARSE,
            recorded_str,
            "3",
        ]))?)?;
        py_mb.push(number(&py, "json_mb_per_s")?);
        py_ev.push(number(&py, "json_events_per_s")?);
        py_fr_mb.push(number(&py, "framing_mb_per_s")?);
        py_fr_ev.push(number(&py, "framing_events_per_s")?);
        py_ty_mb.push(number(&py, "typed_mb_per_s")?);
        py_ty_ev.push(number(&py, "typed_events_per_s")?);
        let cmp = json_line(&output(Command::new(&compare).args([
            recorded_str,
            PARSE_ITERATIONS,
            "1",
        ]))?)?;
        cmp_ours_mb.push(number(&cmp, "ours_mb_per_s")?);
        cmp_ours_fr.push(number(&cmp, "ours_frames_per_s")?);
        es_mb.push(number(&cmp, "eventsource_stream_mb_per_s")?);
        es_fr.push(number(&cmp, "eventsource_stream_frames_per_s")?);
        same_frames &= cmp["same_frames"].as_bool() == Some(true);
    }
    let (mut json_rps, mut sse_rps) = (Vec::new(), Vec::new());
    for round in 0..ctx.runs.min(3) {
        eprintln!(
            "[responses] round {}: emulator requests/s (JSON, SSE)",
            round + 1
        );
        for (kind, sink) in [("json", &mut json_rps), ("sse", &mut sse_rps)] {
            let line = json_line(&output(Command::new(&bin).args([
                "rps",
                kind,
                RPS_SECONDS,
                RPS_CONCURRENCY,
            ]))?)?;
            sink.push(number(&line, "requests_per_s")?);
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    let (om, oe, pm, pe) = (
        median(&mut ours_mb),
        median(&mut ours_ev),
        median(&mut py_mb),
        median(&mut py_ev),
    );
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    let (ofm, ofe, pfm, pfe) = (
        median(&mut ours_fr_mb),
        median(&mut ours_fr_ev),
        median(&mut py_fr_mb),
        median(&mut py_fr_ev),
    );
    let (ptm, pte) = (median(&mut py_ty_mb), median(&mut py_ty_ev));
    let (com, cof, esm, esf) = (
        median(&mut cmp_ours_mb),
        median(&mut cmp_ours_fr),
        median(&mut es_mb),
        median(&mut es_fr),
    );
    let markdown = format!(
        "## Responses API: SSE parsing and the emulator\n\n\
         Recorded stream: {kb:.0} KB, {events:.0} events (a reasoning item, two function calls with 4 KB \
         arguments, a long message in 8-character deltas), produced by the emulator over HTTP and fed \
         to both parsers in 16 KiB chunks, in one run (openai {sdk}, release Rust). Medians of {runs} runs.\n\n\
         | stage | ours MB/s | ours events/s | SDK MB/s | SDK events/s | ratio (events/s) |\n\
         |---|---:|---:|---:|---:|---:|\n\
         | framing: `SseParser` vs `openai._streaming.SSEDecoder` | {ofm:.1} | {ofe:.0} | {pfm:.1} | {pfe:.0} | {rf:.1}x |\n\
         | typed events: `StreamEvent` vs SSEDecoder + `json.loads` + `construct_type(ResponseStreamEvent)` (what the SDK's `Stream` does) | {om:.1} | {oe:.0} | {ptm:.1} | {pte:.0} | {rt:.1}x |\n\
         | ours typed vs SSEDecoder + `json.loads` only (untyped dicts, favours Python) | {om:.1} | {oe:.0} | {pm:.1} | {pe:.0} | {rj:.1}x |\n\n\
         Framing against the `eventsource-stream` crate (0.2.3, the same stream and chunks, \
         `crates/responses/examples/sse_compare.rs`, frames collected into a `Vec` by both; \
         same frames: {same}):\n\n\
         | parser | MB/s | frames/s |\n|---|---:|---:|\n\
         | `SseParser` | {com:.1} | {cof:.0} |\n\
         | `eventsource-stream` | {esm:.1} | {esf:.0} |\n\
         | ours / eventsource-stream | | {res:.1}x |\n\n\
         Emulator (`agent-responses-mock`, release, default echo conversation, {conc} concurrent \
         reqwest clients on 127.0.0.1 for {secs} s, medians of {rps_runs} runs):\n\n\
         | response kind | requests/s |\n|---|---:|\n\
         | JSON (`stream: false`) | {jr:.0} |\n| SSE (`stream: true`, full event sequence) | {sr:.0} |\n",
        kb = bytes / 1000.0,
        events = events_per_pass,
        sdk = sdk_version.trim(),
        runs = ctx.runs,
        rf = ratio(ofe, pfe),
        rt = ratio(oe, pte),
        rj = ratio(oe, pe),
        same = if same_frames { "yes" } else { "NO" },
        res = ratio(cof, esf),
        conc = RPS_CONCURRENCY,
        secs = RPS_SECONDS,
        rps_runs = ctx.runs.min(3),
        jr = median(&mut json_rps),
        sr = median(&mut sse_rps),
    );
    Ok(Section { markdown })
}

fn json_line(text: &str) -> anyhow::Result<Value> {
    let line = text
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .context("no JSON line in output")?;
    serde_json::from_str(line).with_context(|| format!("bad JSON line: {line}"))
}

fn number(value: &Value, key: &str) -> anyhow::Result<f64> {
    value[key]
        .as_f64()
        .with_context(|| format!("missing `{key}` in {value}"))
}
