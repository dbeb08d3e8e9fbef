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
        (Some(s), Some(e)) if e > s => {
            format!("{}{block}{}", &current[..s], &current[e + end.len()..])
        }
        _ => format!("{}\n{block}\n", current.trim_end()),
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, updated).with_context(|| format!("cannot write {}", path.display()))
}
