//! The `agentctl` binary runs on jemalloc with the options `.cargo/config.toml` builds in
//! (issue 16's memory per run rests on them) and its background threads started by `main`: asked to print its statistics at exit
//! (`_RJEM_MALLOC_CONF=stats_print:true`), jemalloc names the options in force.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;

use assert_cmd::cargo::CommandCargoExt as _;

#[test]
fn the_binary_runs_on_jemalloc_with_the_built_in_options() {
    let output = Command::cargo_bin("agentctl")
        .unwrap()
        .env("_RJEM_MALLOC_CONF", "stats_print:true")
        .env_remove("AGENTCTL_DB")
        .arg("--version")
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let stats = String::from_utf8_lossy(&output.stderr);
    for option in [
        "opt.percpu_arena: \"percpu\"",
        "opt.dirty_decay_ms: 1000",
        "opt.muzzy_decay_ms: 0",
        // Off at start (the sandbox's entry needs one thread), on once `main` is past it.
        "opt.background_thread: false (background_thread: true)",
    ] {
        assert!(
            stats.contains(option),
            "jemalloc's statistics do not show `{option}`:\n{stats}"
        );
    }
    let built_in = stats
        .lines()
        .find(|l| l.trim_start().starts_with("config.malloc_conf:"))
        .unwrap_or_default();
    assert!(
        built_in.contains("percpu_arena:percpu,dirty_decay_ms:1000,muzzy_decay_ms:0"),
        "the options are not built in (only set at run time?): {built_in}"
    );
}
