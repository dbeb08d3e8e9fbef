//! Fuzz target `tools`: the model's arguments to the built-in tools (`validate`) and the
//! workspace path confinement (`Workspace::resolve`). Nothing is executed and nothing is
//! written: only validation and resolution run, on a temporary workspace.
//!
//! Properties:
//! 1. Any `arguments` text the model may send (JSON soup, tool-shaped objects with fields
//!    of any type): each tool's `validate` returns, never panics, and accepts only what its
//!    schema allows (a non-blank `command`, a `timeout_ms` in range, a non-empty `path`,
//!    `offset`/`limit` non-negative integers, `limit` at least 1, a string `content`).
//! 2. Any path (`..`, `.`, absolute, the root's own path, doubled slashes, NUL, symlinks out
//!    of the workspace, dangling and looping symlinks, unicode): `resolve` either refuses
//!    it or returns a path under the workspace root whose existing part really is inside
//!    the root, in bounded time.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use agent_fuzzkit::{config, corpus, json_text, json_value, keep_if_failing, within};
use agent_host::tools::{ApprovalMode, Workspace, builtin};
use agent_runtime::ToolRegistry;
use proptest::prelude::*;
use serde_json::Value;

const TARGET: &str = "tools";
const BOUND: Duration = Duration::from_secs(5);
const MAX_TIMEOUT_MS: u64 = 3_600_000;

/// A workspace with a file, a subdirectory, symlinks in, out, dangling and in a loop, and
/// an `outside` directory beside it that nothing may reach.
struct Fixture {
    _dir: tempfile::TempDir,
    workspace: Workspace,
    registry: ToolRegistry,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(root.join("sub/deeper")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(root.join("sub/a.txt"), "a").unwrap();
        std::fs::write(outside.join("secret"), "s").unwrap();
        let link = |target: &Path, name: &str| {
            std::os::unix::fs::symlink(target, root.join(name)).unwrap()
        };
        link(&outside, "out");
        link(&outside.join("secret"), "out-file");
        link(Path::new("../outside"), "rel-out");
        link(Path::new("/nonexistent/x"), "dangling");
        link(&root.join("sub"), "in");
        link(Path::new("loop-b"), "loop-a");
        link(Path::new("loop-a"), "loop-b");
        let workspace = Workspace::new(&root).unwrap();
        let (_, registry) = builtin(&workspace, ApprovalMode::Default);
        Fixture {
            _dir: dir,
            workspace,
            registry,
        }
    })
}

fn check_resolve(path: &str) -> Result<(), TestCaseError> {
    let fixture = fixture();
    let root = fixture.workspace.root();
    let start = Instant::now();
    let resolved = fixture.workspace.resolve(path);
    within(start, BOUND, "resolving")?;
    match resolved {
        Err(refused) => {
            prop_assert!(!refused.0.is_empty());
            prop_assert!(refused.0.len() <= 2 * path.len() + 2 * root.as_os_str().len() + 512);
        }
        Ok(resolved) => {
            prop_assert!(
                resolved.starts_with(root),
                "{path:?} -> {}",
                resolved.display()
            );
            // The part that exists, followed through symlinks, is inside too.
            let mut existing: &Path = &resolved;
            while std::fs::symlink_metadata(existing).is_err() {
                existing = existing.parent().unwrap();
            }
            let real: PathBuf = existing.canonicalize().unwrap();
            prop_assert!(
                real.starts_with(root),
                "{path:?} -> {} -> {}",
                resolved.display(),
                real.display()
            );
        }
    }
    Ok(())
}

fn non_negative(args: &Value, name: &str) -> bool {
    args.get(name)
        .is_none_or(|v| v.is_null() || v.as_u64().is_some())
}

fn optional_string(args: &Value, name: &str) -> bool {
    args.get(name).is_none_or(|v| v.is_null() || v.is_string())
}

fn check_arguments(text: &str) -> Result<(), TestCaseError> {
    let Ok(args) = serde_json::from_str::<Value>(text) else {
        return Ok(()); // the host answers unparseable arguments before any tool sees them
    };
    let registry = &fixture().registry;
    let start = Instant::now();
    for name in registry.names() {
        let tool = registry.get(&name).unwrap();
        let verdict = tool.validate(&args);
        if let Err(reason) = &verdict {
            prop_assert!(
                !reason.is_empty() && reason.len() <= 256,
                "{name}: {reason}"
            );
            continue;
        }
        // Accepted: it must fit the tool's schema.
        prop_assert!(args.is_object(), "{name} accepted {args}");
        let str_arg = |key: &str| args.get(key).and_then(Value::as_str);
        match name.as_str() {
            "shell" => {
                prop_assert!(str_arg("command").is_some_and(|c| !c.trim().is_empty()));
                let ms = args.get("timeout_ms").and_then(Value::as_u64);
                prop_assert!(non_negative(&args, "timeout_ms"));
                prop_assert!(ms.is_none_or(|ms| (1..=MAX_TIMEOUT_MS).contains(&ms)));
            }
            "read_file" => {
                prop_assert!(str_arg("path").is_some_and(|p| !p.is_empty()));
                prop_assert!(non_negative(&args, "offset") && non_negative(&args, "limit"));
                prop_assert!(args.get("limit").and_then(Value::as_u64) != Some(0));
            }
            "write_file" => {
                prop_assert!(str_arg("path").is_some_and(|p| !p.is_empty()));
                prop_assert!(str_arg("content").is_some());
            }
            "list_dir" => prop_assert!(optional_string(&args, "path")),
            other => prop_assert!(false, "unknown built-in tool {other}"),
        }
    }
    within(start, BOUND, "validating")
}

// ---- generators ----

fn path() -> impl Strategy<Value = String> {
    let root = fixture().workspace.root().to_string_lossy().into_owned();
    let parts = prop::sample::select(vec![
        "..", ".", "sub", "a.txt", "deeper", "out", "out-file", "rel-out", "dangling", "in",
        "loop-a", "new", "", "é", "数据", "a\0b", "outside", "secret", " ", "~", "$HOME",
    ]);
    (
        prop::sample::select(vec!["", "/", "//", "root"]),
        prop::collection::vec(parts, 0..8),
    )
        .prop_map(move |(lead, parts)| {
            let lead = if lead == "root" {
                format!("{root}/")
            } else {
                lead.to_owned()
            };
            format!("{lead}{}", parts.join("/"))
        })
}

fn arguments() -> impl Strategy<Value = String> {
    let key = prop::sample::select(vec![
        "command",
        "timeout_ms",
        "path",
        "offset",
        "limit",
        "content",
        "extra",
    ]);
    let value = prop_oneof![
        2 => json_value(),
        1 => path().prop_map(Value::from),
        1 => prop::sample::select(vec![
            Value::from(0), Value::from(1), Value::from(-1), Value::from(MAX_TIMEOUT_MS),
            Value::from(MAX_TIMEOUT_MS + 1), Value::from(u64::MAX), Value::from(1.5),
            Value::from(1e300), Value::from(""), Value::from("  \t\n"), Value::from("ls"),
        ]),
    ];
    prop_oneof![
        3 => prop::collection::vec((key, value), 0..5)
            .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()).to_string()),
        1 => json_text(),
    ]
}

proptest! {
    #![proptest_config(config(500))]

    #[test]
    fn paths_never_escape_the_workspace(path in path()) {
        keep_if_failing("path", "txt", path.as_bytes(), check_resolve(&path))?;
    }

    #[test]
    fn arguments_are_validated_by_the_schema(text in arguments()) {
        keep_if_failing("args", "json", text.as_bytes(), check_arguments(&text))?;
    }
}

#[test]
fn corpus_replays() {
    for (name, bytes) in corpus(TARGET, 5) {
        let text = String::from_utf8_lossy(&bytes);
        if name.ends_with(".txt") {
            for line in text.lines() {
                check_resolve(line).unwrap_or_else(|e| panic!("{name}: {line:?}: {e}"));
            }
        } else {
            check_arguments(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }
}
