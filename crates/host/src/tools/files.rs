//! `read_file`, `write_file` and `list_dir`, confined to the workspace.
//!
//! Invariants: every path goes through [`Workspace::resolve`] before any I/O, and is then
//! opened from the workspace root without following a symlink ([`beneath`]), so a path
//! swapped after the check is refused, not followed; `write_file` writes neither `.git` nor
//! the workspace's `agentctl.toml`; reads are
//! bounded ([`MAX_READ_LINES`] lines, [`MAX_READ_BYTES`] bytes per call, and in memory
//! whatever the file's size; the model pages with `offset`/`limit`); a write replaces the
//! whole file, creating parent directories inside the workspace, so writing the same
//! content twice is harmless (retry-safe); what `read_file` and `list_dir` return has the
//! API key masked ([`mask_key`]), as `shell`'s output has.

use futures::future::BoxFuture;
use serde_json::{Value, json};

use agent_runtime::{Tool, ToolContext, ToolFailure};

use std::path::Path;

use rustix::fs::OFlags;

use super::beneath;
use super::file_threads::run_on_file_thread;
use super::read_window::read_window;
use super::secrets::mask_key;
use super::{Workspace, arg_str, arg_u64, object, only_keys};

/// Lines returned by one `read_file` when the model gives no `limit`.
pub(crate) const MAX_READ_LINES: u64 = 2000;
/// Bytes returned by one `read_file` at most.
pub(crate) const MAX_READ_BYTES: usize = 256 * 1024;
/// Bytes `write_file` accepts.
/// (Well under the journal's 4 MiB per event: the arguments are journaled with the call.)
pub(crate) const MAX_WRITE_BYTES: usize = 1024 * 1024;
/// Entries `list_dir` returns at most.
pub(crate) const MAX_ENTRIES: usize = 1000;

fn required_path(args: &Value, name: &str) -> Result<String, String> {
    let obj = object(args)?;
    let path = arg_str(obj, name)?.ok_or(format!("missing `{name}` (a string)"))?;
    if path.is_empty() {
        return Err(format!("`{name}` is empty"));
    }
    Ok(path.to_string())
}

/// Refuses anything but a regular file (a FIFO or a device would block or never end),
/// checked on the open descriptor.
fn regular_file(file: &std::fs::File, path: &str) -> Result<(), ToolFailure> {
    let meta = file
        .metadata()
        .map_err(|err| ToolFailure(format!("{path}: {err}")))?;
    if meta.is_file() {
        Ok(())
    } else if meta.is_dir() {
        Err(ToolFailure(format!("{path} is a directory (use list_dir)")))
    } else {
        Err(ToolFailure(format!("{path} is not a regular file")))
    }
}

/// `real` (what [`Workspace::resolve`] returned) relative to the workspace root.
fn relative<'a>(workspace: &Workspace, real: &'a Path) -> Result<&'a Path, ToolFailure> {
    real.strip_prefix(workspace.root())
        .map_err(|_| ToolFailure(format!("{}: outside the workspace", real.display())))
}

/// Refuses a write into `.git` (anywhere: git runs its hooks and config unsandboxed later),
/// to the workspace's `agentctl.toml` or to its `HEAD` (which, with `objects/` and `refs/`,
/// makes git take the workspace for a repository), the paths a sandboxed command may not
/// write either.
fn protected_write(rel: &Path, path: &str) -> Result<(), ToolFailure> {
    let in_git = rel
        .components()
        .any(|part| part.as_os_str() == std::ffi::OsStr::new(".git"));
    if in_git || rel == Path::new("agentctl.toml") || rel == Path::new("HEAD") {
        return Err(ToolFailure(format!(
            "{path}: write_file does not write `.git`, the workspace's agentctl.toml or its HEAD (git and agentctl run what they hold outside the sandbox)"
        )));
    }
    Ok(())
}

/// Runs a call's file-system work in one piece on a file thread: the path's resolution
/// (which follows symlinks) and the I/O after it. The async workers never wait on the disk,
/// and a call is one hop, not one per system call. It finishes even if the call is
/// cancelled.
async fn on_file_thread<F>(work: F) -> Result<Value, ToolFailure>
where
    F: FnOnce() -> Result<Value, ToolFailure> + Send + 'static,
{
    run_on_file_thread(work)
        .await
        .map_err(|err| ToolFailure(err.to_string()))?
}

/// `read_file {path, offset?, limit?}`: lines `offset..offset+limit` (1-based offset).
#[derive(Debug, Clone)]
pub struct ReadFile {
    pub(crate) workspace: Workspace,
}

impl Tool for ReadFile {
    fn name(&self) -> &str {
        "read_file"
    }

    fn validate(&self, args: &Value) -> Result<(), String> {
        required_path(args, "path")?;
        let obj = object(args)?;
        only_keys(obj, &["path", "offset", "limit"])?;
        arg_u64(obj, "offset")?;
        if arg_u64(obj, "limit")? == Some(0) {
            return Err("`limit` must be at least 1".into());
        }
        Ok(())
    }

    fn call(
        &self,
        args: Value,
        _ctx: ToolContext,
    ) -> BoxFuture<'static, Result<Value, ToolFailure>> {
        let workspace = self.workspace.clone();
        Box::pin(on_file_thread(move || {
            let path = required_path(&args, "path").map_err(ToolFailure)?;
            let obj = object(&args).map_err(ToolFailure)?;
            let offset = arg_u64(obj, "offset")
                .map_err(ToolFailure)?
                .unwrap_or(1)
                .max(1);
            let limit = arg_u64(obj, "limit")
                .map_err(ToolFailure)?
                .unwrap_or(MAX_READ_LINES);
            let real = workspace.resolve(&path).map_err(|e| ToolFailure(e.0))?;
            let file = beneath::open_file(
                workspace.root(),
                relative(&workspace, &real)?,
                OFlags::RDONLY,
                false,
            )
            .map_err(|err| ToolFailure(format!("{path}: {err}")))?;
            regular_file(&file, &path)?;
            let window = read_window(
                std::io::BufReader::with_capacity(64 * 1024, file),
                offset,
                limit,
                MAX_READ_BYTES,
            )
            .map_err(|err| ToolFailure(format!("{path}: {err}")))?;
            let mut out = window.text;
            let last = offset - 1 + window.shown;
            if !window.total_known {
                out.push_str(&format!(
                    "[lines {offset}-{last}; the file goes on past the {} MiB one read scans \
                     ({} lines in them); read on with offset {}]\n",
                    super::read_window::MAX_SCAN_BYTES >> 20,
                    window.total,
                    last + 1
                ));
            } else if last < window.total {
                out.push_str(&format!(
                    "[lines {offset}-{last} of {}; read on with offset {}]\n",
                    window.total,
                    last + 1
                ));
            }
            Ok(json!(mask_key(out)))
        }))
    }

    fn retry_safe(&self) -> bool {
        true
    }
}

/// `write_file {path, content}`: replaces the file's content.
#[derive(Debug, Clone)]
pub struct WriteFile {
    pub(crate) workspace: Workspace,
}

impl Tool for WriteFile {
    fn name(&self) -> &str {
        "write_file"
    }

    fn validate(&self, args: &Value) -> Result<(), String> {
        let path = required_path(args, "path")?;
        only_keys(object(args)?, &["path", "content"])?;
        if path.ends_with('/') {
            return Err(format!("`path` {path} names a directory; give a file path"));
        }
        let content = arg_str(object(args)?, "content")?.ok_or("missing `content` (a string)")?;
        if content.len() > MAX_WRITE_BYTES {
            return Err(format!("`content` is over {MAX_WRITE_BYTES} bytes"));
        }
        Ok(())
    }

    fn call(
        &self,
        args: Value,
        _ctx: ToolContext,
    ) -> BoxFuture<'static, Result<Value, ToolFailure>> {
        let workspace = self.workspace.clone();
        Box::pin(on_file_thread(move || {
            let path = required_path(&args, "path").map_err(ToolFailure)?;
            let content = object(&args)
                .and_then(|o| arg_str(o, "content"))
                .map_err(ToolFailure)?
                .unwrap_or("")
                .to_string();
            let real = workspace.resolve(&path).map_err(|e| ToolFailure(e.0))?;
            let rel = relative(&workspace, &real)?;
            protected_write(rel, &path)?;
            let io_err = |err: std::io::Error| ToolFailure(format!("{path}: {err}"));
            // Missing directories are made on the way, inside what was already opened.
            let mut file =
                beneath::open_file(workspace.root(), rel, OFlags::WRONLY | OFlags::CREATE, true)
                    .map_err(io_err)?;
            if !file.metadata().map_err(io_err)?.is_file() {
                return Err(ToolFailure(format!(
                    "{path} exists and is not a regular file"
                )));
            }
            file.set_len(0).map_err(io_err)?;
            std::io::Write::write_all(&mut file, content.as_bytes()).map_err(io_err)?;
            Ok(json!(format!("wrote {} bytes to {path}", content.len())))
        }))
    }

    fn retry_safe(&self) -> bool {
        true
    }
}

/// `list_dir {path?}`: the entries of a directory, directories marked with `/`.
#[derive(Debug, Clone)]
pub struct ListDir {
    pub(crate) workspace: Workspace,
}

impl Tool for ListDir {
    fn name(&self) -> &str {
        "list_dir"
    }

    fn validate(&self, args: &Value) -> Result<(), String> {
        let obj = object(args)?;
        only_keys(obj, &["path"])?;
        arg_str(obj, "path")?;
        Ok(())
    }

    fn call(
        &self,
        args: Value,
        _ctx: ToolContext,
    ) -> BoxFuture<'static, Result<Value, ToolFailure>> {
        let workspace = self.workspace.clone();
        Box::pin(on_file_thread(move || {
            let path = object(&args)
                .and_then(|o| arg_str(o, "path"))
                .map_err(ToolFailure)?
                .filter(|p| !p.is_empty())
                .unwrap_or(".")
                .to_string();
            let real = workspace.resolve(&path).map_err(|e| ToolFailure(e.0))?;
            let io_err = |err: std::io::Error| ToolFailure(format!("{path}: {err}"));
            let dir = beneath::open_dir(workspace.root(), relative(&workspace, &real)?, false)
                .map_err(io_err)?;
            let entries = beneath::list(&dir).map_err(io_err)?;
            let count = entries.len();
            // Sorted before cut: the first entries by name, not the file system's order.
            let mut names: Vec<(String, bool)> = entries;
            names.sort_unstable();
            let names: Vec<String> = names
                .into_iter()
                .take(MAX_ENTRIES)
                .map(|(name, is_dir)| {
                    // A name holding a line break or another control character would read
                    // as several entries: written as a JSON string instead.
                    let mut shown = if name.chars().any(char::is_control) {
                        serde_json::to_string(&name).unwrap_or_default()
                    } else {
                        name
                    };
                    if is_dir {
                        shown.push('/');
                    }
                    shown
                })
                .collect();
            let mut out = names.join("\n");
            if count > MAX_ENTRIES {
                out.push_str(&format!(
                    "\n[the first {MAX_ENTRIES} of {count} entries, by name]"
                ));
            }
            Ok(json!(mask_key(out)))
        }))
    }

    fn retry_safe(&self) -> bool {
        true
    }
}
