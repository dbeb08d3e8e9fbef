//! `docs/architecture.md`'s crate graph, checked against `cargo metadata`.
//!
//! The doc lists every workspace crate and the workspace crates it depends on between
//! `<!-- crate-edges:start -->` and `<!-- crate-edges:end -->`, one line per crate:
//! `crate -> dep, dep` or `crate -> (none)`. Only normal and build dependencies count
//! (optional ones included: a feature can turn them on); dev-dependencies are test support
//! and are left out. The test fails when the doc names an edge cargo does not have, misses
//! one it has, names a crate that is not in the workspace or leaves one out, and prints the
//! list cargo has, ready to paste.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Context as _;
use serde_json::Value;

use crate::process::{cargo, workspace_root};

const START: &str = "<!-- crate-edges:start -->";
const END: &str = "<!-- crate-edges:end -->";

/// Each workspace crate with the workspace crates it depends on.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// The graph in `cargo metadata`'s output: every workspace member, and its normal and build
/// dependencies that are workspace members themselves (by package name, so a renamed
/// dependency counts under its real name).
fn graph_of_metadata(metadata: &Value) -> anyhow::Result<Graph> {
    let packages = metadata["packages"]
        .as_array()
        .context("cargo metadata has no `packages`")?;
    let members: BTreeSet<&str> = packages.iter().filter_map(|p| p["name"].as_str()).collect();
    let mut graph = Graph::new();
    for package in packages {
        let name = package["name"]
            .as_str()
            .context("a package without a name")?;
        let deps = package["dependencies"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|d| d["kind"] != "dev")
            .filter_map(|d| d["name"].as_str())
            .filter(|d| members.contains(d) && *d != name)
            .map(str::to_owned)
            .collect();
        graph.insert(name.to_owned(), deps);
    }
    Ok(graph)
}

/// The graph written between the markers of `doc`. Every line in the block is a crate's
/// line (or a code fence, or blank): anything else is an error, not skipped, so a
/// reformatted block cannot pass by being read as empty.
fn graph_of_doc(doc: &str) -> anyhow::Result<Graph> {
    let start = doc.find(START).context("no crate-edges:start marker")? + START.len();
    let len = doc[start..]
        .find(END)
        .context("no crate-edges:end marker after the start")?;
    let mut graph = Graph::new();
    for line in doc[start..start + len].lines().map(str::trim) {
        if line.is_empty() || line.starts_with("```") {
            continue;
        }
        let (name, deps) = line
            .split_once("->")
            .with_context(|| format!("not `crate -> deps`: {line:?}"))?;
        let deps: BTreeSet<String> = match deps.trim() {
            "(none)" => BTreeSet::new(),
            deps => deps.split(',').map(|d| d.trim().to_owned()).collect(),
        };
        anyhow::ensure!(
            !deps.iter().any(String::is_empty),
            "an empty name in {line:?}"
        );
        let previous = graph.insert(name.trim().to_owned(), deps);
        anyhow::ensure!(previous.is_none(), "{} is listed twice", name.trim());
    }
    Ok(graph)
}

/// How `doc` differs from `actual`, one finding per line; empty when they agree.
fn differences(doc: &Graph, actual: &Graph) -> Vec<String> {
    let mut found = Vec::new();
    for name in doc.keys().filter(|n| !actual.contains_key(*n)) {
        found.push(format!("{name} is documented but is not a workspace crate"));
    }
    for (name, deps) in actual {
        let Some(documented) = doc.get(name) else {
            found.push(format!("{name} is a workspace crate the doc does not list"));
            continue;
        };
        for dep in documented.difference(deps) {
            found.push(format!(
                "{name} -> {dep} is documented but not in cargo metadata"
            ));
        }
        for dep in deps.difference(documented) {
            found.push(format!(
                "{name} -> {dep} is in cargo metadata but not documented"
            ));
        }
    }
    found
}

/// `graph` in the doc's format, names aligned.
fn render(graph: &Graph) -> String {
    let width = graph.keys().map(String::len).max().unwrap_or(0);
    graph
        .iter()
        .map(|(name, deps)| {
            let deps = if deps.is_empty() {
                "(none)".to_owned()
            } else {
                deps.iter().cloned().collect::<Vec<_>>().join(", ")
            };
            format!("{name:width$} -> {deps}\n")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata() -> Value {
        let out = cargo()
            .args([
                "metadata",
                "--format-version",
                "1",
                "--no-deps",
                "--offline",
            ])
            .output()
            .expect("cargo metadata runs");
        assert!(
            out.status.success(),
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON")
    }

    #[test]
    fn architecture_doc_lists_exactly_the_crate_edges_of_cargo_metadata() {
        let path = workspace_root().join("docs/architecture.md");
        let doc = std::fs::read_to_string(&path).expect("docs/architecture.md");
        let documented = graph_of_doc(&doc).expect("the crate-edges block");
        let actual = graph_of_metadata(&metadata()).expect("the workspace graph");
        let found = differences(&documented, &actual);
        assert!(
            found.is_empty(),
            "docs/architecture.md's crate-edges block disagrees with cargo metadata:\n  {}\n\
             What cargo metadata has (order the lines as the doc does):\n{}",
            found.join("\n  "),
            render(&actual)
        );
    }

    fn graph(edges: &[(&str, &[&str])]) -> Graph {
        edges
            .iter()
            .map(|(n, d)| (n.to_string(), d.iter().map(|d| d.to_string()).collect()))
            .collect()
    }

    #[test]
    fn reads_the_block_and_only_the_block() {
        let doc = format!(
            "a -> c (not in the block)\n{START}\n```text\nagentctl    -> agent-host, agent-redact\n\
             agent-host  -> (none)\nagent-redact -> (none)\n```\n{END}\nb -> d\n"
        );
        assert_eq!(
            graph_of_doc(&doc).unwrap(),
            graph(&[
                ("agentctl", &["agent-host", "agent-redact"]),
                ("agent-host", &[]),
                ("agent-redact", &[]),
            ])
        );
    }

    #[test]
    fn a_block_it_cannot_read_is_an_error() {
        assert!(graph_of_doc("no markers").is_err());
        assert!(graph_of_doc(&format!("{START}\nagentctl depends on host\n{END}")).is_err());
        assert!(graph_of_doc(&format!("{START}\na -> b,\n{END}")).is_err());
        assert!(graph_of_doc(&format!("{START}\na -> b\na -> c\n{END}")).is_err());
    }

    #[test]
    fn finds_edges_missing_on_either_side_and_unknown_crates() {
        let actual = graph(&[("a", &["b", "c"]), ("b", &[]), ("c", &[]), ("d", &[])]);
        let doc = graph(&[("a", &["b", "x"]), ("b", &["c"]), ("c", &[]), ("x", &[])]);
        let found = differences(&doc, &actual);
        assert_eq!(
            found,
            [
                "x is documented but is not a workspace crate",
                "a -> x is documented but not in cargo metadata",
                "a -> c is in cargo metadata but not documented",
                "b -> c is documented but not in cargo metadata",
                "d is a workspace crate the doc does not list",
            ]
        );
        assert!(differences(&actual, &actual).is_empty());
    }

    #[test]
    fn dev_dependencies_and_self_edges_do_not_count() {
        let metadata = serde_json::json!({"packages": [
            {"name": "a", "dependencies": [
                {"name": "b", "kind": null},
                {"name": "c", "kind": "build"},
                {"name": "t", "kind": "dev"},
                {"name": "a", "kind": "dev"},
                {"name": "serde", "kind": null},
            ]},
            {"name": "b", "dependencies": []},
            {"name": "c", "dependencies": []},
            {"name": "t", "dependencies": []},
        ]});
        assert_eq!(
            graph_of_metadata(&metadata).unwrap(),
            graph(&[("a", &["b", "c"]), ("b", &[]), ("c", &[]), ("t", &[])])
        );
        assert_eq!(
            render(&graph(&[("ab", &["c", "d"]), ("c", &[])])),
            "ab -> c, d\nc  -> (none)\n"
        );
    }
}
