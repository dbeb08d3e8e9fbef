//! Writing one area's section into `docs/benchmarks.md`, keeping the others.

use std::path::Path;

use anyhow::Context as _;

const HEADER: &str = "# Benchmarks\n\nWritten by `cargo xtask bench`; each section is replaced when its area is re-run.\nOur code and the seed's Python baselines run side by side in the same run on the same\nmachine (2 cores, shared VM: quote ratios, not absolute numbers). Values are medians.\n";

pub fn write_section(path: &Path, area: &str, markdown: &str) -> anyhow::Result<()> {
    let start = format!("<!-- bench:{area}:start -->");
    let end = format!("<!-- bench:{area}:end -->");
    let current = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => HEADER.to_string(),
        Err(err) => return Err(err).with_context(|| format!("cannot read {}", path.display())),
    };
    let block = format!("{start}\n{}\n{end}", markdown.trim_end());
    let updated = match (current.find(&start), current.find(&end)) {
        (Some(s), Some(e)) if e > s && current.matches(&start).count() == 1 => {
            format!("{}{block}{}", &current[..s], &current[e + end.len()..])
        }
        (None, None) => format!("{}\n{block}\n", current.trim_end()),
        // One marker without the other, or markers twice: appending a block would leave a
        // stray marker that a later run pairs with the new one, replacing everything between
        // (hand-written notes included).
        _ => anyhow::bail!(
            "{}: the markers of `{area}` are not one {start} followed by one {end}; fix them by hand",
            path.display()
        ),
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, updated).with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::write_section;

    #[test]
    fn a_stray_marker_stops_the_write_instead_of_swallowing_notes() {
        let dir = std::env::temp_dir().join(format!("xtask-doc-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("benchmarks.md");
        std::fs::write(
            &path,
            "# B\n<!-- bench:a:start -->\nold\n<!-- bench:a:end -->\nnotes\n",
        )
        .unwrap();
        write_section(&path, "a", "new").unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("<!-- bench:a:start -->\nnew\n<!-- bench:a:end -->\nnotes"));
        write_section(&path, "b", "other").unwrap();
        assert!(
            std::fs::read_to_string(&path)
                .unwrap()
                .ends_with("<!-- bench:b:end -->\n")
        );
        // A start marker whose end was lost: refused, the file left as it was.
        std::fs::write(&path, "# B\n<!-- bench:a:start -->\nold\nnotes\n").unwrap();
        assert!(write_section(&path, "a", "new").is_err());
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "# B\n<!-- bench:a:start -->\nold\nnotes\n"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
