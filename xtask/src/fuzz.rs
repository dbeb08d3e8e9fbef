//! `cargo xtask fuzz [TARGET...] [--time SECONDS] [--list]`: long campaigns of the property
//! tests, one target per parser of outside input (all of them when none is named).
//!
//! Each target is an integration test of proptest properties whose case count reads
//! `PROPTEST_CASES`. A campaign runs that test in rounds (each round is a new random seed)
//! with large case counts until the time is spent, sizing each round from the speed of the
//! previous one, then reports rounds, cases per property and time. A failing case is
//! shrunk by proptest, printed, and written by the test itself into the target's corpus
//! folder (`FUZZ_SAVE_DIR`) as `regress-<property>.*`, where the corpus test replays it
//! from then on.

use std::time::{Duration, Instant};

use crate::process::{cargo, run_cmd, workspace_root};

/// One fuzz target: a package's integration test of proptest properties.
struct Target {
    name: &'static str,
    package: &'static str,
    /// The integration-test binary.
    test: &'static str,
    /// The test-name filter within it (`module::`), or `""` for all of it.
    filter: &'static str,
    /// Its corpus folder under `fixtures/fuzz/`.
    corpus: &'static str,
    about: &'static str,
}

const TARGETS: &[Target] = &[
    Target {
        name: "sse",
        package: "agent-responses",
        test: "all",
        filter: "sse_differential::",
        corpus: "sse",
        about: "SseParser vs eventsource-stream, and under every chunking",
    },
    Target {
        name: "events",
        package: "agent-responses",
        test: "all",
        filter: "fuzz_events::",
        corpus: "events",
        about: "stream, WebSocket and client events, HTTP error bodies; round trips",
    },
    Target {
        name: "appserver",
        package: "agent-appserver",
        test: "all",
        filter: "fuzz_wire::",
        corpus: "appserver",
        about: "the app-server JSONL reader and line parser, under every chunking",
    },
    Target {
        name: "requests",
        package: "agent-responses-mock",
        test: "all",
        filter: "fuzz_requests::",
        corpus: "requests",
        about: "the emulator's HTTP and WebSocket request handling",
    },
    Target {
        name: "serve",
        package: "agent-serve",
        test: "fuzz_serve",
        filter: "",
        corpus: "serve",
        about: "the HTTP API's guard, path, query and body handling",
    },
    Target {
        name: "script",
        package: "agent-responses-mock",
        test: "all",
        filter: "fuzz_script::",
        corpus: "script",
        about: "emulator script loading, round trip, and serving what loads",
    },
    Target {
        name: "journal",
        package: "agent-journal",
        test: "all",
        filter: "fuzz_journal::",
        corpus: "journal",
        about: "event names and payloads; append then replay on memory:",
    },
    Target {
        name: "units",
        package: "agent-context",
        test: "all",
        filter: "fuzz_units::",
        corpus: "units",
        about: "context units: acceptance rule, window and search round trip",
    },
    Target {
        name: "redact",
        package: "agent-redact",
        test: "fuzz_redact",
        filter: "",
        corpus: "redact",
        about: "database URL redaction: the password never survives",
    },
    Target {
        name: "tools",
        package: "agent-host",
        test: "all",
        filter: "fuzz_tools::",
        corpus: "tools",
        about: "built-in tool arguments and workspace path confinement",
    },
    Target {
        name: "mcp",
        package: "agent-host",
        test: "all",
        filter: "fuzz_mcp::",
        corpus: "mcp",
        about: "MCP tool results and listings as the host reads them; agentctl.toml and --mcp",
    },
    Target {
        name: "fold",
        package: "agent-host",
        test: "all",
        filter: "fuzz_fold::",
        corpus: "fold",
        about: "a run's journal, mutated: the fold, its views, --json, next request, checkpoints",
    },
];

const DEFAULT_SECONDS: u64 = 600;
/// Cases in the first round, before the speed is known.
const FIRST_ROUND_CASES: u64 = 1000;
/// No round is sized longer than this, so progress is reported regularly.
const MAX_ROUND: Duration = Duration::from_secs(120);

pub fn run(args: &[String]) -> anyhow::Result<()> {
    let mut seconds = DEFAULT_SECONDS;
    let mut names = Vec::new();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--time" => {
                let value = rest
                    .next()
                    .ok_or_else(|| anyhow::anyhow!("--time needs a number of seconds"))?;
                seconds = value
                    .parse()
                    .map_err(|_| anyhow::anyhow!("--time `{value}` is not a number of seconds"))?;
            }
            "--list" => {
                for t in TARGETS {
                    println!(
                        "{:<10} {} --test {} {}  {}",
                        t.name, t.package, t.test, t.filter, t.about
                    );
                }
                return Ok(());
            }
            name => names.push(name),
        }
    }
    let targets: Vec<&Target> = if names.is_empty() {
        TARGETS.iter().collect()
    } else {
        names
            .iter()
            .map(|name| {
                TARGETS.iter().find(|t| t.name == *name).ok_or_else(|| {
                    let known: Vec<&str> = TARGETS.iter().map(|t| t.name).collect();
                    anyhow::anyhow!("unknown fuzz target `{name}` (known: {})", known.join(" "))
                })
            })
            .collect::<anyhow::Result<_>>()?
    };
    let mut report = Vec::new();
    for target in targets {
        report.push(campaign(target, Duration::from_secs(seconds))?);
    }
    for line in report {
        println!("{line}");
    }
    Ok(())
}

/// Runs one target for `budget`; returns its report line, or the failure.
fn campaign(target: &Target, budget: Duration) -> anyhow::Result<String> {
    eprintln!(
        "xtask: fuzz `{}` ({}) for {} s",
        target.name,
        target.about,
        budget.as_secs()
    );
    let test = || {
        let mut cmd = cargo();
        cmd.args(["test", "-j2", "-p", target.package, "--test", target.test]);
        cmd
    };
    run_cmd(test().arg("--no-run"))?;
    let save_dir = workspace_root()
        .join("fixtures")
        .join("fuzz")
        .join(target.corpus);
    let start = Instant::now();
    let (mut rounds, mut cases) = (0u64, 0u64);
    let mut next = FIRST_ROUND_CASES;
    loop {
        let round_start = Instant::now();
        eprintln!(
            "xtask: fuzz `{}` round {}: {next} cases per property",
            target.name,
            rounds + 1
        );
        let result = run_cmd(
            test()
                .arg("--")
                .args((!target.filter.is_empty()).then_some(target.filter))
                .arg("--test-threads=2")
                .env("PROPTEST_CASES", next.to_string())
                .env("FUZZ_SAVE_DIR", &save_dir),
        );
        if let Err(err) = result {
            anyhow::bail!(
                "fuzz `{}` failed after {rounds} clean rounds ({cases} cases per property, {:.0} s): \
                 {err}\nthe shrunk input is printed above and saved as {}/regress-* (when the \
                 test says \"Too many local rejects\" there is none: a strategy's filter rejected \
                 more cases than proptest allows, and the strategy needs mending instead)",
                target.name,
                start.elapsed().as_secs_f64(),
                save_dir.display()
            );
        }
        rounds += 1;
        cases += next;
        let remaining = budget.saturating_sub(start.elapsed());
        if remaining < Duration::from_secs(1) {
            break;
        }
        let per_case = round_start.elapsed().as_secs_f64() / next as f64;
        let fits = remaining.min(MAX_ROUND).as_secs_f64() / per_case.max(1e-9);
        next = (fits as u64).max(10);
    }
    Ok(format!(
        "fuzz `{}`: passed, {rounds} rounds, {cases} cases per property in {:.0} s",
        target.name,
        start.elapsed().as_secs_f64()
    ))
}
