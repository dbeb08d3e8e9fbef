//! `cargo xtask interop`: real third-party clients against our code.
//!
//! Suites are registered in [`SUITES`]; each is a function that prepares what it needs
//! (a virtualenv, an npm install) and fails loudly when a step fails.

type Suite = (&'static str, fn() -> anyhow::Result<()>);

/// Every interop suite, by name.
const SUITES: &[Suite] = &[];

pub fn run(args: &[String]) -> anyhow::Result<()> {
    let selected: Vec<&Suite> = if args.is_empty() {
        SUITES.iter().collect()
    } else {
        let mut chosen = Vec::new();
        for name in args {
            let suite = SUITES
                .iter()
                .find(|(n, _)| n == name)
                .ok_or_else(|| anyhow::anyhow!("unknown interop suite `{name}`"))?;
            chosen.push(suite);
        }
        chosen
    };
    if selected.is_empty() {
        eprintln!("xtask: no interop suites are registered yet");
    }
    for (name, suite) in selected {
        eprintln!("xtask: interop suite `{name}`");
        suite()?;
        eprintln!("xtask: interop suite `{name}` passed");
    }
    Ok(())
}
