//! Support shared by the fuzz targets (one `tests/fuzz_*.rs` per parser of outside input).
//!
//! A target is an integration test of proptest properties plus a test that replays its seed
//! corpus, `fixtures/fuzz/<target>/`. Under `cargo test` each property runs a modest number
//! of cases; `cargo xtask fuzz <target>` sets `PROPTEST_CASES` (see [`config`]) for long
//! campaigns and `FUZZ_SAVE_DIR` to the corpus folder, where [`keep_if_failing`] writes the
//! shrunk failing input as `regress-<property>.<ext>` for the corpus test to replay.

// Test support: failing loudly is the point.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]
#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError};
use serde_json::Value;

/// The proptest configuration of a target: `default_cases` under a plain `cargo test`, the
/// `PROPTEST_CASES` count when a campaign sets it; no persistence files (failures are kept
/// in the corpus instead).
pub fn config(default_cases: u32) -> Config {
    let from_env = std::env::var("PROPTEST_CASES").is_ok();
    Config {
        cases: if from_env {
            Config::default().cases
        } else {
            default_cases
        },
        failure_persistence: None,
        ..Config::default()
    }
}

/// Under a campaign (`FUZZ_SAVE_DIR` set), writes `input` to `regress-<property>.<ext>`
/// there when `result` is a failure. Proptest's last failing call is its shrunk minimum, so
/// the file left behind is the smallest failing input.
pub fn keep_if_failing(
    property: &str,
    ext: &str,
    input: &[u8],
    result: Result<(), TestCaseError>,
) -> Result<(), TestCaseError> {
    if result.is_err()
        && let Some(dir) = std::env::var_os("FUZZ_SAVE_DIR")
    {
        let path = PathBuf::from(dir).join(format!("regress-{property}.{ext}"));
        if let Err(e) = std::fs::write(&path, input) {
            eprintln!("cannot save {}: {e}", path.display());
        }
    }
    result
}

/// The folder of a target's corpus, `fixtures/fuzz/<target>/`.
pub fn corpus_dir(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/fuzz")
        .join(target)
}

/// The seed corpus of `target`: every file of its folder (`README*` aside), sorted by
/// name, as `(name, bytes)`. Panics when the folder has fewer than `at_least` files.
pub fn corpus(target: &str, at_least: usize) -> Vec<(String, Vec<u8>)> {
    let dir = corpus_dir(target);
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, path)
        })
        .filter(|(name, path)| !name.starts_with("README") && path.is_file())
        .map(|(name, path)| (name, std::fs::read(&path).unwrap()))
        .collect();
    files.sort();
    assert!(
        files.len() >= at_least,
        "seed corpus of `{target}` is missing in {} ({} files, want {at_least})",
        dir.display(),
        files.len()
    );
    files
}

/// Fails the case when `start` was longer ago than `limit` (the bounded-time property; the
/// limits are generous, for debug builds on a busy machine).
pub fn within(start: Instant, limit: Duration, what: &str) -> Result<(), TestCaseError> {
    let took = start.elapsed();
    if took > limit {
        return Err(TestCaseError::fail(format!(
            "{what} took {took:?}, over the {limit:?} bound"
        )));
    }
    Ok(())
}

/// Nasty JSON texts every JSON-reading target gets besides its own shapes: deep nesting,
/// lone surrogates, NUL, huge numbers, BOM, trailing garbage, invalid UTF-8 (lossily).
pub fn nasty_json() -> Vec<String> {
    let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    let deep_obj = |n: usize| format!("{}1{}", "{\"a\":".repeat(n), "}".repeat(n));
    vec![
        String::new(),
        " ".into(),
        "null".into(),
        "{}".into(),
        "[]".into(),
        "\"\\ud800\"".into(),
        "{\"type\":\"\\ud800\"}".into(),
        "{\"type\":\"\\udc00\\ud800\"}".into(),
        "{\"a\":\"\\u0000\"}".into(),
        "{\"a\":\"x\0y\"}".into(),
        "{\"a\":1e400}".into(),
        "{\"a\":-1e400}".into(),
        "{\"a\":123456789012345678901234567890}".into(),
        "{\"a\":1e-400}".into(),
        "{\"a\":-0}".into(),
        "\u{feff}{}".into(),
        "{} x".into(),
        "{\"a\":1,\"a\":2}".into(),
        deep(127),
        deep(128),
        deep(129),
        deep(100_000),
        deep_obj(200),
        "[".repeat(100_000),
    ]
}

/// String content for JSON values: mostly printable unicode, sometimes NUL, a BOM, text
/// that spells an escape (`\u0000`, `\ud800`), quotes and backslashes.
pub fn json_string() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "\\PC{0,16}",
        1 => prop::sample::select(vec![
            "\\u0000", "\\\\u0000", "\0", "a\0b", "\u{feff}", "\u{fffd}", "😀", "\\", "\"",
            "\\ud800", "\r\n", "\n",
        ])
        .prop_map(str::to_owned),
    ]
}

/// Any JSON value, up to 6 levels deep: extreme integers, floats, [`json_string`]s. Floats
/// are those serde_json reads back exactly: without its `float_roundtrip` feature (which a
/// build has only when one of its crates, such as jsonschema, asks for it) it may read a
/// float one ULP off, so round-trip properties would fail on serde_json rather than on the
/// code under test.
pub fn json_value() -> impl Strategy<Value = Value> {
    let float = prop_oneof![
        any::<f64>(), // NaN and infinities become null
        prop::sample::select(vec![f64::MAX, f64::MIN_POSITIVE, -0.0, 1e300, 5e-324]),
    ]
    // Mapped, not filtered: about one random float in four is read back off, and filtering
    // them out ran past proptest's limit of rejected cases (65,536) in a long campaign.
    .prop_map(reads_back_exactly);
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        float.prop_map(Value::from),
        json_string().prop_map(Value::from),
    ];
    leaf.prop_recursive(6, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
            prop::collection::vec((json_string(), inner), 0..6)
                .prop_map(|pairs| Value::Object(pairs.into_iter().collect())),
        ]
    })
}

/// `f` if serde_json reads its text back exactly, else the float serde_json reads back
/// (followed a few times: reading that one back often gives itself), else 0.5 (about 3% of
/// random floats). NaN and the infinities, which serde_json writes as `null`, are kept.
fn reads_back_exactly(f: f64) -> f64 {
    let mut x = f;
    for _ in 0..4 {
        match serde_json::from_str::<f64>(&Value::from(x).to_string()) {
            Ok(back) if back == x => return x,
            Ok(back) => x = back,
            Err(_) => return x,
        }
    }
    0.5
}

/// JSON-ish text: a value's encoding (compact or pretty), token soup with lone surrogate
/// escapes, NUL escapes and out-of-range numbers, or one of [`nasty_json`].
pub fn json_text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => json_value().prop_map(|v| v.to_string()),
        1 => json_value().prop_map(|v| serde_json::to_string_pretty(&v).unwrap()),
        2 => prop::collection::vec(
            prop::sample::select(vec![
                "{", "}", "[", "]", ",", ":", "\"a\"", "\"type\"", "\"\\ud800\"",
                "\"\\udfff\"", "\"\\ud83d\\ude00\"", "\"\\u0000\"", "\"\\\\u0000\"", "1e400",
                "-1e400", "1e-400", "123456789012345678901234567890", "-0", "0.5", "null",
                "true", " ", "\n",
            ]),
            1..24,
        )
        .prop_map(|t| t.concat()),
        1 => prop::sample::select(nasty_json()),
    ]
}

#[cfg(test)]
mod tests {
    use proptest::strategy::ValueTree as _;

    use super::*;

    /// What `json_value`'s floats are made of: every float comes out as one serde_json
    /// reads back exactly (or as NaN or an infinity, which it writes as `null`).
    #[test]
    fn floats_are_mapped_to_ones_that_read_back_exactly() {
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let (mut off, mut fallback, n) = (0, 0, 20_000);
        for _ in 0..n {
            let f = any::<f64>().new_tree(&mut runner).unwrap().current();
            let text = Value::from(f).to_string();
            let exact = serde_json::from_str::<f64>(&text).map_or(true, |back| back == f);
            let g = reads_back_exactly(f);
            if !exact {
                off += 1;
                fallback += usize::from(g == 0.5);
            } else {
                assert!(g == f || (g.is_nan() && f.is_nan()), "{f} became {g}");
            }
            if g.is_finite() {
                let back: f64 = serde_json::from_str(&Value::from(g).to_string()).unwrap();
                assert_eq!(back, g, "{f} became {g}, which reads back as {back}");
            }
        }
        // Built for this crate alone, about 23% are read back off and 3% end at the
        // fallback (4,556 and 675 of these 20,000): most keep a nearby value. In a
        // workspace build jsonschema's features give serde_json `float_roundtrip`, and
        // then none is off.
        assert!(off < n / 2, "{off} of {n} read back off");
        assert!(fallback < n / 10, "{fallback} of {n} fell back to 0.5");
    }
}
