//! The seed's demo (`live_api.py`): the fictional `scan` tool, its definitions per mode, and
//! the prompts. Used by `agentctl api ...` and by the ported contract tests; compiled only
//! with the `demo` cargo feature, so library users never see it.

use serde_json::{Value, json};

use crate::loops::{ToolExecutor, ToolFailure};
use crate::types::{FunctionTool, Tool};

pub const MODEL: &str = "gpt-6-astra";
pub const INSTRUCTIONS: &str =
    "数据全是教学 fixture。保留 source。工具失败必须披露，不可编造结果。";
pub const LOOP_PROMPT: &str = "查 api 和 ui 的虚构风险统计，计算 high 总数并注明来源。";
pub const ASYNC_PROMPT: &str =
    "启动 api 模块查询，同时先解释什么是单元测试；结果到达后再解释风险统计。";
pub const COMPACT_PROMPT: &str = "项目约束：Python 标准库、只读分析、不要改文件。请复述。";
pub const COMPACT_FOLLOW_UP: &str = "继续，列出必须遵守的三个约束。";

/// The four seed modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Direct,
    Ptc,
    Async,
    Compact,
}

impl Mode {
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
pub fn definition(mode: Mode) -> Vec<Tool> {
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
    let mut tools = vec![Tool::Function(tool)];
    if mode == Mode::Ptc {
        tools.push(Tool::ProgrammaticToolCalling(
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

/// The seed's `scan`: fictional risk counts; only `{"module": "api"|"ui"}` is accepted.
pub fn scan(arguments: &str) -> Result<Value, ToolFailure> {
    let args: Value = serde_json::from_str(arguments)
        .map_err(|e| ToolFailure::new(format!("invalid arguments: {e}")))?;
    let module = match args.as_object() {
        Some(map) if map.len() == 1 => map.get("module").and_then(Value::as_str),
        _ => None,
    };
    match module {
        Some(module @ ("api" | "ui")) => Ok(json!({"ok": true, "module": module,
            "high": if module == "api" { 2 } else { 0 }, "source": "fictional-fixture-v1", "error": ""})),
        _ => Err(ToolFailure::new("invalid module")),
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
    ) -> Result<String, ToolFailure> {
        if name != "scan" {
            return Err(ToolFailure::new("unknown tool"));
        }
        scan(arguments).map(|v| v.to_string())
    }

    fn failure_output(&self, _name: &str, failure: &ToolFailure) -> String {
        json!({"ok": false, "module": "", "high": 0, "error": failure.message, "source": "local-dispatcher"}).to_string()
    }
}
