//! `agentctl memory`: inspect and correct long-term memory (agent-context).

use agent_context::{ContextError, ContextStore, MemoryEntry, NewEvidence};
use clap::Subcommand;
use serde_json::json;

use crate::global::GlobalArgs;
use crate::output::{line, typed_line, with_hint};

/// 30 days, in seconds.
const DEFAULT_MAX_AGE: i64 = 30 * 24 * 3600;

/// Memory is consolidated from evidence: per (project, key) the newest confirmed,
/// unrevoked evidence wins, and its source is kept as provenance. Times are Unix seconds.
#[derive(Debug, Subcommand)]
pub enum MemoryCmd {
    /// Print what is remembered for one project, with provenance; entries older than
    /// --max-age are flagged "needs refresh".
    Recall {
        /// Project to recall; other projects' entries are never shown.
        #[arg(long)]
        project: String,
        /// Age (seconds) after which an entry needs a refresh; default 30 days.
        #[arg(long, default_value_t = DEFAULT_MAX_AGE, value_parser = clap::value_parser!(i64).range(0..))]
        max_age: i64,
        /// The current time (Unix seconds); default now.
        #[arg(long)]
        now: Option<i64>,
    },
    /// Record a piece of evidence (its source must be new), then consolidate.
    Add {
        /// Unique id of the observation, e.g. the rollout that produced it.
        #[arg(long)]
        source: String,
        /// Project the fact belongs to.
        #[arg(long)]
        project: String,
        /// What the fact is about, e.g. `jdk`.
        #[arg(long)]
        key: String,
        /// The observed value, e.g. `17`.
        #[arg(long)]
        value: String,
        /// When it was observed (Unix seconds, at most a day from now); default now.
        #[arg(long, allow_negative_numbers = true)]
        observed: Option<i64>,
        /// Record it as unconfirmed: kept, but never used for memory.
        #[arg(long)]
        unconfirmed: bool,
        /// Only record; leave consolidation for later.
        #[arg(long)]
        no_consolidate: bool,
    },
    /// Revoke a source (it stops counting for memory), then consolidate.
    Revoke {
        /// The source to revoke: the id the evidence was added with (`memory add`).
        source: String,
        /// Only revoke; leave consolidation for later.
        #[arg(long)]
        no_consolidate: bool,
    },
    /// Recompute memory for every (project, key) whose evidence changed since last time.
    Consolidate,
    /// List all evidence of a project (or one key): value, time, confirmed, revoked.
    Evidence {
        /// Project whose evidence to list.
        #[arg(long)]
        project: String,
        /// Only this key.
        #[arg(long)]
        key: Option<String>,
    },
}

impl MemoryCmd {
    /// Whether the command writes to the store (the others open it read-only when it
    /// cannot be written).
    fn writes(&self) -> bool {
        !matches!(self, MemoryCmd::Recall { .. } | MemoryCmd::Evidence { .. })
    }
}

pub async fn run(global: &GlobalArgs, cmd: MemoryCmd) -> anyhow::Result<std::process::ExitCode> {
    let store = if cmd.writes() {
        crate::db::open_context(global).await?
    } else {
        crate::db::open_context_for_reading(global).await?
    };
    match cmd {
        MemoryCmd::Recall {
            project,
            max_age,
            now,
        } => {
            let now = now.unwrap_or_else(unix_now);
            let entries = store.recall(&project, now, max_age).await?;
            let pending = store.pending().await?;
            if global.json {
                for entry in &entries {
                    typed_line("memory.entry", entry)?;
                }
            } else {
                if entries.is_empty() {
                    line(&format!("nothing remembered for project `{project}`"))?;
                }
                for entry in &entries {
                    line(&describe(entry))?;
                }
                if pending > 0 {
                    let writable = if store.is_read_only() {
                        ", which needs the file writable"
                    } else {
                        ""
                    };
                    line(&format!(
                        "({pending} changed key(s) await `agentctl memory consolidate`{writable})"
                    ))?;
                }
            }
        }
        MemoryCmd::Add {
            source,
            project,
            key,
            value,
            observed,
            unconfirmed,
            no_consolidate,
        } => {
            let observed = observed.unwrap_or_else(unix_now);
            let evidence = NewEvidence {
                source,
                project,
                key,
                value,
                observed,
                confirmed: !unconfirmed,
            };
            store
                .add_evidence(&evidence)
                .await
                .map_err(|err| match err {
                    ContextError::DuplicateSource(_) => with_hint(
                        err,
                        "evidence is immutable: revoke the old source and add a new one",
                    ),
                    ContextError::ObservedOutOfRange { .. } => with_hint(
                        err,
                        "--observed takes Unix seconds, from 0 to a day from now; omit it for now",
                    ),
                    other => other.into(),
                })?;
            let consolidated = consolidate_unless(&store, no_consolidate).await?;
            if global.json {
                typed_line(
                    "memory.added",
                    json!({"added": evidence, "consolidation": consolidated}),
                )?;
            } else {
                line(&format!(
                    "added {} ({}/{} = {})",
                    field(&evidence.source),
                    field(&evidence.project),
                    field(&evidence.key),
                    field(&evidence.value),
                ))?;
                // What memory holds for the key now: unconfirmed or older evidence leaves
                // it as it was, so "updated" would not be true of every add.
                if consolidated.is_some() {
                    let now = store
                        .recall(&evidence.project, unix_now(), DEFAULT_MAX_AGE)
                        .await?
                        .into_iter()
                        .find(|e| e.key == evidence.key);
                    line(&remembered_line(
                        &evidence.project,
                        &evidence.key,
                        now.as_ref(),
                    ))?;
                }
            }
        }
        MemoryCmd::Revoke {
            source,
            no_consolidate,
        } => {
            let revoked = store.revoke(&source).await.map_err(|err| match err {
                ContextError::UnknownSource(_) => with_hint(
                    err,
                    "list sources with `agentctl memory evidence --project P`",
                ),
                other => other.into(),
            })?;
            let consolidated = consolidate_unless(&store, no_consolidate).await?;
            let now_remembered = if consolidated.is_some() {
                store
                    .recall(&revoked.project, unix_now(), DEFAULT_MAX_AGE)
                    .await?
                    .into_iter()
                    .find(|e| e.key == revoked.key)
            } else {
                None
            };
            if global.json {
                typed_line(
                    "memory.revoked",
                    json!({"revoked": revoked, "consolidation": consolidated, "now": now_remembered}),
                )?;
            } else {
                let state = if revoked.newly_revoked {
                    "revoked"
                } else {
                    "was already revoked:"
                };
                line(&format!(
                    "{state} {} ({}/{})",
                    revoked.source, revoked.project, revoked.key
                ))?;
                if consolidated.is_some() {
                    line(&remembered_line(
                        &revoked.project,
                        &revoked.key,
                        now_remembered.as_ref(),
                    ))?;
                }
            }
        }
        MemoryCmd::Consolidate => {
            let c = store.consolidate().await?;
            if global.json {
                typed_line("memory.consolidated", c)?;
            } else {
                line(&format!(
                    "recomputed {} key(s), {} remembered",
                    c.recomputed, c.written
                ))?;
            }
        }
        MemoryCmd::Evidence { project, key } => {
            let rows = store.evidence(&project, key.as_deref()).await?;
            for e in &rows {
                if global.json {
                    typed_line("memory.evidence", e)?;
                } else {
                    let mut flags = Vec::new();
                    if !e.confirmed {
                        flags.push("unconfirmed");
                    }
                    if e.revoked {
                        flags.push("revoked");
                    }
                    line(&format!(
                        "{}\t{} = {}\tobserved {}\t{}",
                        field(&e.source),
                        field(&e.key),
                        field(&e.value),
                        e.observed,
                        if flags.is_empty() {
                            "ok".to_string()
                        } else {
                            flags.join(",")
                        }
                    ))?;
                }
            }
            if rows.is_empty() && !global.json {
                line(&format!("no evidence for project `{project}`"))?;
            }
        }
    }
    store.close().await;
    Ok(std::process::ExitCode::SUCCESS)
}

async fn consolidate_unless(
    store: &ContextStore,
    skip: bool,
) -> anyhow::Result<Option<agent_context::Consolidation>> {
    if skip {
        Ok(None)
    } else {
        Ok(Some(store.consolidate().await?))
    }
}

/// `P/K is now V (from S)`, or `P/K is not remembered`: what memory holds for a key after
/// a consolidation.
fn remembered_line(project: &str, key: &str, now: Option<&MemoryEntry>) -> String {
    match now {
        Some(e) => format!(
            "{}/{} is now {} (from {})",
            field(project),
            field(key),
            field(&e.value),
            field(&e.source)
        ),
        None => format!("{}/{} is not remembered", field(project), field(key)),
    }
}

/// `key = value (from SOURCE, observed T[, needs refresh])`, on one line.
pub fn describe(entry: &MemoryEntry) -> String {
    format!(
        "{} = {} (from {}, observed {}{})",
        field(&entry.key),
        field(&entry.value),
        field(&entry.source),
        entry.observed,
        if entry.needs_refresh {
            ", needs refresh"
        } else {
            ""
        }
    )
}

/// `text` as one field of a line: newlines and tabs written out (`\n`, `\t`, and a
/// backslash doubled so that they read back), which would otherwise start another line or
/// field of the listing. Other control characters are [`line()`]'s to escape.
fn field(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains(['\n', '\t', '\\']) {
        return text.into();
    }
    text.replace('\\', "\\\\")
        .replace('\n', "\\n")
        .replace('\t', "\\t")
        .into()
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
