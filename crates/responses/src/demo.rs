//! The demo: the fictional `scan` tool, its definitions per mode, and
//! the prompts. Used by `agentctl api ...` and by the ported contract tests; compiled only
//! with the `demo` cargo feature, so library users never see it.

use serde_json::{Value, json};

use crate::loops::{ExecutorFailure, ToolExecutor};
use crate::types::{FunctionTool, ToolDefinition};

/// The model the demo asks for (any string works with the emulator).
pub const MODEL: &str = "gpt-6-astra";
/// The demo's system instructions: disclose tool failures, never invent results.
pub const INSTRUCTIONS: &str =
    "数据全是教学 fixture。保留 source。工具失败必须披露，不可编造结果。";
/// The prompt of the direct and PTC loops: sum fictional risk counts over two modules.
pub const LOOP_PROMPT: &str = "查 api 和 ui 的虚构风险统计，计算 high 总数并注明来源。";
/// The prompt of the async loop: explain something while the tool runs.
pub const ASYNC_PROMPT: &str =
    "启动 api 模块查询，同时先解释什么是单元测试；结果到达后再解释风险统计。";
/// The first prompt of the compaction run: constraints to keep.
pub const COMPACT_PROMPT: &str = "项目约束：Python 标准库、只读分析、不要改文件。请复述。";
/// The follow-up after compaction: the constraints must have survived it.
pub const COMPACT_FOLLOW_UP: &str = "继续，列出必须遵守的三个约束。";

/// The four demo modes, one per kind of tool loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Function tools, called by the model directly.
    Direct,
    /// Programmatic tool calling: the model's program calls the tools.
    Ptc,
    /// Async tools, dispatched while the response streams.
    Async,
    /// Compaction of a conversation, then a follow-up.
    Compact,
}

impl Mode {
    /// The mode's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Direct => "direct",
            Mode::Ptc => "ptc",
            Mode::Async => "async",
            Mode::Compact => "compact",
        }
    }
}

/// The tools for `mode`: `scan` (async only in async mode; programmatic-only with an
/// `output_schema` in PTC mode, plus the `programmatic_tool_calling` tool). Async and PTC
/// settings never mix.
pub fn definition(mode: Mode) -> Vec<ToolDefinition> {
    let mut tool = FunctionTool::new(
        "scan",
        "读取指定模块的虚构风险统计。先检查 ok；失败时不可使用 high 作为统计结果。",
        json!({"type": "object", "properties": {"module": {"type": "string", "enum": ["api", "ui"]}},
               "required": ["module"], "additionalProperties": false}),
    );
    match mode {
        Mode::Async => tool.is_async = Some(true),
        Mode::Ptc => {
            tool.allowed_callers = Some(Some(vec!["programmatic".into()]));
            tool.output_schema = Some(Some(output_schema()));
        }
        Mode::Direct | Mode::Compact => {}
    }
    let mut tools = vec![ToolDefinition::Function(tool)];
    if mode == Mode::Ptc {
        tools.push(ToolDefinition::ProgrammaticToolCalling(
            crate::types::Fields::default(),
        ));
    }
    tools
}

/// The JSON Schema of `scan`'s output; failures use the same five fields.
pub fn output_schema() -> Value {
    json!({"type": "object", "properties": {
        "ok": {"type": "boolean"}, "error": {"type": "string"},
        "module": {"type": "string"}, "high": {"type": "integer"},
        "source": {"type": "string"}}, "required": ["ok", "error", "module", "high", "source"],
        "additionalProperties": false})
}

/// The demo `scan`: fictional risk counts; only `{"module": "api"|"ui"}` is accepted.
pub fn scan(arguments: &str) -> Result<Value, ExecutorFailure> {
    let args: Value = serde_json::from_str(arguments)
        .map_err(|e| ExecutorFailure::new(format!("invalid arguments: {e}")))?;
    let module = match args.as_object() {
        Some(map) if map.len() == 1 => map.get("module").and_then(Value::as_str),
        _ => None,
    };
    match module {
        Some(module @ ("api" | "ui")) => Ok(json!({"ok": true, "module": module,
            "high": if module == "api" { 2 } else { 0 }, "source": "fictional-fixture-v1", "error": ""})),
        _ => Err(ExecutorFailure::new("invalid module")),
    }
}

/// Executes `scan`; any other name is a failure ("unknown tool").
#[derive(Debug, Clone, Copy, Default)]
pub struct ScanTool;

impl ToolExecutor for ScanTool {
    async fn call(
        &self,
        _call_id: &str,
        name: &str,
        arguments: &str,
    ) -> Result<String, ExecutorFailure> {
        if name != "scan" {
            return Err(ExecutorFailure::new("unknown tool"));
        }
        scan(arguments).map(|v| v.to_string())
    }

    fn failure_output(&self, _name: &str, failure: &ExecutorFailure) -> String {
        json!({"ok": false, "module": "", "high": 0, "error": failure.message, "source": "local-dispatcher"}).to_string()
    }
}
