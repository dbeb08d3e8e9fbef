//! Help text names only flags that exist: every `--flag` in the help of a command is one
//! of that command's options, a global option, or an option of one of its subcommands (a
//! group's help describes its subcommands, `api ... [--mock]`). Walks the whole command
//! tree through the binary's own `--help` output. Help also speaks of this project only (no
//! "as in the seed").

// Test helpers outside `#[test]` functions may unwrap too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::process::Command;

use assert_cmd::cargo::CommandCargoExt as _;

/// Flags of other programs that our help quotes, with whose they are.
const FOREIGN: &[(&str, &str)] = &[("--listen", "`codex app-server --listen stdio://`")];

/// One command's help: the long flags it defines, the long flags its text names, and its
/// subcommands.
struct Help {
    text: String,
    defined: BTreeSet<String>,
    named: BTreeSet<String>,
    subcommands: Vec<String>,
}

fn help(path: &[String]) -> Help {
    let output = Command::cargo_bin("agentctl")
        .unwrap()
        .env_remove("AGENTCTL_DB")
        .args(path)
        .arg("--help")
        .output()
        .unwrap();
    assert!(output.status.success(), "{path:?} --help");
    let text = String::from_utf8(output.stdout).unwrap();
    let mut help = Help {
        text: text.clone(),
        defined: BTreeSet::new(),
        named: long_flags(&text),
        subcommands: Vec::new(),
    };
    let mut section = "";
    for line in text.lines() {
        if !line.starts_with(' ') && line.ends_with(':') {
            section = line;
            continue;
        }
        let entry = line.trim_start();
        // An entry starts at the first indentation level: `  -x, --flag <V>  help` or
        // `  name  help`; deeper lines continue the help of the entry above.
        let indent = line.len() - entry.len();
        if entry.is_empty() || indent > 6 {
            continue;
        }
        let first = entry.split_whitespace().next().unwrap_or_default();
        match section {
            "Commands:" if first != "help" => help.subcommands.push(first.to_owned()),
            "Options:" => {
                let flag = entry
                    .split([' ', ','])
                    .find(|word| word.starts_with("--"))
                    .map(|flag| flag.split(['=', '<', '[']).next().unwrap_or(flag));
                if let Some(flag) = flag {
                    help.defined.insert(flag.to_owned());
                }
            }
            _ => {}
        }
    }
    help
}

/// Every `--word` in `text`.
fn long_flags(text: &str) -> BTreeSet<String> {
    let mut flags = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("--") {
        let after = &rest[at + 2..];
        let name: String = after
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        let starts_a_word = rest[..at]
            .chars()
            .last()
            .is_none_or(|c| !c.is_ascii_alphanumeric() && c != '-');
        if starts_a_word && name.chars().next().is_some_and(|c| c.is_ascii_lowercase()) {
            flags.insert(format!("--{name}"));
        }
        rest = &after[name.len()..];
    }
    flags
}

/// The flags defined by `path` and every command below it; checks each help on the way.
fn check(
    path: &[String],
    global: &BTreeSet<String>,
    failures: &mut Vec<String>,
) -> BTreeSet<String> {
    let help = help(path);
    let mut known = help.defined.clone();
    for sub in &help.subcommands {
        let mut child = path.to_vec();
        child.push(sub.clone());
        known.extend(check(&child, global, failures));
    }
    // Help speaks of this project only: the demos' origin is described once, in docs/.
    if help.text.to_lowercase().contains("seed") {
        failures.push(format!(
            "`agentctl {} --help` speaks of the seed",
            path.join(" ")
        ));
    }
    for flag in &help.named {
        let foreign = FOREIGN.iter().any(|(name, _)| name == flag);
        if !known.contains(flag) && !global.contains(flag) && !foreign {
            failures.push(format!("`agentctl {} --help` names {flag}", path.join(" ")));
        }
    }
    known
}

#[test]
fn every_flag_named_in_help_exists() {
    let root = help(&[]);
    // The root's options are global (`--db`, `--json`), plus `--help` and `--version`.
    let global = root.defined.clone();
    assert!(
        global.contains("--db") && global.contains("--json"),
        "{global:?}"
    );
    assert!(root.subcommands.len() >= 8, "{:?}", root.subcommands);
    let mut failures = Vec::new();
    check(&[], &global, &mut failures);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_flag_scanner_finds_flags_and_skips_other_dashes() {
    let flags = long_flags("use --db URL, `--json`; a -- b; x--y; --Upper; [--mock]\n--keep-units");
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    assert_eq!(flags, ["--db", "--json", "--keep-units", "--mock"]);
}

/// `agentctl --help` opens with what the tool does for its user (the doc comment of `Cli`),
/// not the crate's description for developers ("front end for the agentctl crates").
#[test]
fn the_root_help_says_what_agentctl_does() {
    let output = Command::new(env!("CARGO_BIN_EXE_agentctl"))
        .arg("--help")
        .output()
        .unwrap();
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(
        text.starts_with("Run agent turns durably against the OpenAI Responses API"),
        "{text}"
    );
}
