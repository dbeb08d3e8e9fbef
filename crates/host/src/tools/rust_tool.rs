//! Tools written in Rust: a name, a description, an argument type whose JSON Schema is
//! derived (`schemars`), and an async function, registered with
//! [`Host::tool`](crate::run::Host::tool).
//!
//! ```
//! use agent_host::tools::{Policy, RustTool};
//! use schemars::JsonSchema;
//! use serde::Deserialize;
//!
//! #[derive(Deserialize, JsonSchema)]
//! #[serde(deny_unknown_fields)]
//! struct Add { a: i64, b: i64 }
//!
//! let add = RustTool::new("add", "Add two integers.", |args: Add| async move {
//!     Ok::<_, std::convert::Infallible>(args.a + args.b)
//! })
//! .read_only();
//! assert_eq!(add.name(), "add");
//! assert!(add.is_strict());
//! assert_eq!(add.policy_in_force(), Policy::Auto);
//! ```
//!
//! Invariants:
//! - A Rust tool is an [`agent_runtime::Tool`] like the built-ins: each call is journaled
//!   before it runs, idempotent by the model's `call_id`, never run twice; one cut off by a
//!   crash runs again on resume only when the tool is [`retry_safe`](RustTool::retry_safe),
//!   otherwise it becomes an approval with reason `indeterminate`.
//! - Arguments that do not deserialize into the argument type are refused before anything
//!   is journaled as scheduled (`tool.refused`, the model is told why); the function only
//!   ever sees a value of its type.
//! - The function's `Ok` value is the call's result (a string as itself, anything else as
//!   JSON); its `Err` is a tool failure whose text is the error's `Display`: the model is
//!   told, the run goes on. Either is shown with the API key masked and cut to
//!   [`RESULT_CAP`] bytes (a larger JSON value is shown as its text, cut). A panic in the function is caught and is a failure too
//!   (`the tool panicked`), never a result and never the host's end.
//! - The schema sent to the model is the derived one without `$schema` and `title`, sent
//!   `strict` when it can follow the API's strict rules: a struct with
//!   `#[serde(deny_unknown_fields)]` does, its `Option` fields then listed as required
//!   and nullable (the model sends `null` for "absent"); one with a field that may be left
//!   out but not be `null` (`#[serde(default)]` on a plain type), or without
//!   `deny_unknown_fields`, is sent as derived, not strict.

use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;

use agent_responses::types::text_format::{strict_version, valid_format_name};
use agent_runtime::{ToolContext, ToolFailure};
use futures::FutureExt as _;
use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::result_cap::{RESULT_CAP, cap};
use super::secrets::{api_key, mask_key, scrub};
use super::{ApprovalMode, Policy, ToolConfig, ToolSpec};
use crate::RawJson;

/// A result as the model and the journal get it: without the API key, and at most
/// [`RESULT_CAP`](crate::tools::mcp::RESULT_CAP) bytes (a larger value becomes its JSON
/// text, cut, with a note).
fn shown(value: Value) -> Value {
    shown_without(value, api_key())
}

/// [`shown`], with `key` as the API key.
fn shown_without(mut value: Value, key: Option<&str>) -> Value {
    scrub(&mut value, key);
    match value {
        Value::String(text) => Value::String(cap(text)),
        other => {
            let text = other.to_string();
            if text.len() <= RESULT_CAP {
                other
            } else {
                Value::String(cap(text))
            }
        }
    }
}

/// Why a call's arguments do not deserialize, as the model and the journal get it: serde
/// quotes the offending value, which can be anything the model sent.
fn invalid(err: &impl Display) -> String {
    cap(mask_key(format!("invalid arguments: {err}")))
}

/// The function behind a [`RustTool`]: the arguments (checked to deserialize) and the
/// call to the result or the failure's text.
type CallFn =
    dyn Fn(Value, ToolCall) -> BoxFuture<'static, Result<Value, ToolFailure>> + Send + Sync;

/// What a Rust tool's function learns of its call ([`RustTool::with_call`]).
#[derive(Debug, Clone)]
pub struct ToolCall {
    run_id: String,
    call_id: String,
    cancel: agent_runtime::CancellationToken,
}

impl ToolCall {
    /// The run the call belongs to.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The model's `call_id`: the call's idempotency key (a tool that reaches a system of
    /// record can pass it on so that system, too, does the call at most once).
    pub fn call_id(&self) -> &str {
        &self.call_id
    }

    /// Fired when the run is interrupted: a long call should stop soon after (it is
    /// dropped after the runtime's grace period otherwise).
    pub fn cancellation(&self) -> &agent_runtime::CancellationToken {
        &self.cancel
    }

    fn of(ctx: &ToolContext) -> ToolCall {
        let thread = ctx.thread();
        ToolCall {
            run_id: thread.strip_prefix("run:").unwrap_or(thread).to_string(),
            call_id: ctx.key.call_id.clone(),
            cancel: ctx.cancel.clone(),
        }
    }
}

/// Whether arguments deserialize into a [`RustTool`]'s argument type; `Err` says why not.
type CheckFn = dyn Fn(&Value) -> Result<(), String> + Send + Sync;

/// A tool written in Rust (see this module's documentation, `tools/rust_tool.rs`).
#[derive(Clone)]
pub struct RustTool {
    name: String,
    description: String,
    parameters: Value,
    strict: bool,
    policy: Policy,
    retry_safe: bool,
    side_effects: bool,
    /// Checks that arguments deserialize into the argument type.
    check: Arc<CheckFn>,
    call: Arc<CallFn>,
}

impl std::fmt::Debug for RustTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RustTool")
            .field("name", &self.name)
            .field("policy", &self.policy)
            .field("retry_safe", &self.retry_safe)
            .field("side_effects", &self.side_effects)
            .finish_non_exhaustive()
    }
}

impl RustTool {
    /// A tool called `name` that the model sees described by `description`, taking
    /// arguments of type `A` (its JSON Schema derived) and running `f`.
    ///
    /// Defaults, the safe side: it runs without asking ([`Policy::Auto`]), has side effects
    /// (`--approval deny` refuses it) and is not retry-safe (a call cut off by a crash asks
    /// a human before it runs again). See [`read_only`](Self::read_only),
    /// [`policy`](Self::policy) and [`retry_safe`](Self::retry_safe).
    pub fn new<A, F, Fut, T, E>(
        name: impl Into<String>,
        description: impl Into<String>,
        f: F,
    ) -> RustTool
    where
        A: DeserializeOwned + JsonSchema + Send + 'static,
        F: Fn(A) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
        T: Serialize,
        E: Display,
    {
        RustTool::with_call(name, description, move |args: A, _: ToolCall| f(args))
    }

    /// As [`new`](Self::new), for a function that also takes its [`ToolCall`]: the run, the
    /// model's `call_id` (an idempotency key to pass on) and the interrupt's cancellation.
    ///
    /// ```
    /// use agent_host::tools::{RustTool, ToolCall};
    ///
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Charge { cents: u64 }
    ///
    /// let charge = RustTool::with_call("charge", "Charge the card.", |c: Charge, call: ToolCall| async move {
    ///     // The payment API deduplicates on the key: a call approved again after a crash
    ///     // cannot charge twice.
    ///     Ok::<_, String>(format!("charged {} with key {}", c.cents, call.call_id()))
    /// });
    /// assert!(!charge.parameters()["properties"]["cents"].is_null());
    /// ```
    pub fn with_call<A, F, Fut, T, E>(
        name: impl Into<String>,
        description: impl Into<String>,
        f: F,
    ) -> RustTool
    where
        A: DeserializeOwned + JsonSchema + Send + 'static,
        F: Fn(A, ToolCall) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
        T: Serialize,
        E: Display,
    {
        let mut parameters = schemars::schema_for!(A).to_value();
        if let Some(obj) = parameters.as_object_mut() {
            obj.remove("$schema");
            obj.remove("title");
        }
        let (parameters, strict) = match strict_version(&parameters) {
            Some(strict) => (strict, true),
            None => (parameters, false),
        };
        let f = Arc::new(f);
        let call =
            move |args: Value, call: ToolCall| -> BoxFuture<'static, Result<Value, ToolFailure>> {
                let f = Arc::clone(&f);
                Box::pin(async move {
                    let args = A::deserialize(args).map_err(|err| ToolFailure(invalid(&err)))?;
                    // A panic in the tool is its failure, not the host's.
                    let ran = std::panic::AssertUnwindSafe(async move { f(args, call).await })
                        .catch_unwind()
                        .await
                        .map_err(|_| ToolFailure("the tool panicked".into()))?;
                    let value = ran.map_err(|err| ToolFailure(cap(mask_key(err.to_string()))))?;
                    serde_json::to_value(value)
                        .map_err(|err| ToolFailure(format!("the tool's result is not JSON: {err}")))
                        .map(shown)
                })
            };
        let check = |args: &Value| A::deserialize(args).map(drop).map_err(|err| invalid(&err));
        RustTool {
            name: name.into(),
            description: description.into(),
            parameters,
            strict,
            policy: Policy::Auto,
            retry_safe: false,
            side_effects: true,
            check: Arc::new(check),
            call: Arc::new(call),
        }
    }

    /// The tool's own policy: [`Policy::Ask`] to have a human approve each call,
    /// [`Policy::Deny`] to offer it but refuse every call. The run's approval mode and a
    /// policy configured for the name (`[tools] NAME = ...`) still override it.
    pub fn policy(mut self, policy: Policy) -> RustTool {
        self.policy = policy;
        self
    }

    /// Whether running a call twice is harmless: then a call cut off by a crash runs again
    /// on resume instead of asking a human.
    pub fn retry_safe(mut self, retry_safe: bool) -> RustTool {
        self.retry_safe = retry_safe;
        self
    }

    /// Whether the tool changes anything (`--approval deny` refuses tools that do).
    pub fn side_effects(mut self, side_effects: bool) -> RustTool {
        self.side_effects = side_effects;
        self
    }

    /// A tool that only reads: retry-safe and without side effects.
    pub fn read_only(self) -> RustTool {
        self.retry_safe(true).side_effects(false)
    }

    /// The name the model calls it by.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The JSON Schema of its arguments, as sent to the model.
    pub fn parameters(&self) -> &Value {
        &self.parameters
    }

    /// Whether its schema is sent `strict` (it follows the API's strict rules).
    pub fn is_strict(&self) -> bool {
        self.strict
    }

    /// Its own policy (before the run's approval mode).
    pub fn policy_in_force(&self) -> Policy {
        self.policy
    }

    /// Why a run cannot offer it beside tools called `taken`, if it cannot.
    pub(crate) fn name_problem(&self, taken: &[String]) -> Option<String> {
        if self.parameters.get("type") != Some(&Value::String("object".into())) {
            // `()` and unit structs derive `{"type": "null"}`, which the API refuses.
            return Some(format!(
                "its arguments' type must derive an object schema (a struct with named fields; `struct NoArgs {{}}` for none), not {}",
                self.parameters
            ));
        }
        if !valid_format_name(&self.name) {
            return Some("a tool's name must be 1 to 64 of a-z, A-Z, 0-9, _ and -".into());
        }
        if self.name.contains("__") {
            return Some("`__` is kept for MCP tools (SERVER__TOOL)".into());
        }
        taken
            .contains(&self.name)
            .then(|| "another tool of the run has this name".into())
    }

    /// How a run records and offers it under `mode` and `config`'s policies.
    pub(crate) fn spec(&self, mode: ApprovalMode, config: &ToolConfig) -> ToolSpec {
        let own = config
            .policies
            .get(&self.name)
            .copied()
            .unwrap_or(self.policy);
        ToolSpec {
            name: self.name.clone(),
            description: self.description.clone(),
            parameters: RawJson::from_value(&self.parameters),
            policy: mode.apply(own, self.side_effects),
            retry_safe: self.retry_safe,
            mcp: None,
            strict: self.strict,
        }
    }
}

impl agent_runtime::Tool for RustTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn validate(&self, args: &Value) -> Result<(), String> {
        (self.check)(args)
    }

    fn retry_safe(&self) -> bool {
        self.retry_safe
    }

    fn call(
        &self,
        args: Value,
        ctx: ToolContext,
    ) -> BoxFuture<'static, Result<Value, ToolFailure>> {
        (self.call)(args, ToolCall::of(&ctx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[test]
    fn a_result_is_shown_without_the_key_and_at_most_the_cap() {
        let key = "sk-test-SECRET123";
        assert_eq!(
            shown_without(json!({"note": format!("key is {key}"), "n": 1}), Some(key)),
            json!({"note": "key is ***", "n": 1})
        );
        let long = shown_without(json!("x".repeat(RESULT_CAP + 10)), Some(key));
        let long = long.as_str().unwrap_or_default();
        assert!(
            long.starts_with("xxx") && long.ends_with("[... 10 bytes of the result truncated ...]")
        );
        // A structured value past the cap is shown as its JSON text, cut.
        let rows: Vec<Value> = (0..RESULT_CAP / 8).map(|n| json!({"row": n})).collect();
        let table = shown_without(Value::Array(rows), None);
        let table = table.as_str().unwrap_or_default();
        assert!(table.starts_with("[{\"row\":0},"), "{}", &table[..20]);
        assert!(table.len() < RESULT_CAP + 100 && table.ends_with("truncated ...]"));
        assert_eq!(shown_without(json!(42), None), json!(42));
    }

    #[derive(Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    struct Weather {
        /// The city.
        city: String,
    }

    #[derive(Deserialize, JsonSchema)]
    struct Loose {
        #[allow(dead_code)]
        note: Option<String>,
    }

    fn a_call() -> ToolCall {
        ToolCall {
            run_id: "r".into(),
            call_id: "c".into(),
            cancel: agent_runtime::CancellationToken::new(),
        }
    }

    fn weather() -> RustTool {
        RustTool::new(
            "weather",
            "The weather of a city.",
            |w: Weather| async move {
                if w.city.is_empty() {
                    return Err("no city given".to_string());
                }
                Ok(json!({"city": w.city, "temp": 21}))
            },
        )
    }

    #[test]
    fn arguments_that_do_not_derive_an_object_schema_are_refused() {
        let now = RustTool::new(
            "now",
            "The time.",
            |_: ()| async move { Ok::<_, String>(1) },
        );
        let problem = now.name_problem(&[]).unwrap_or_default();
        assert!(problem.contains("object schema"), "{problem}");
        assert_eq!(weather().name_problem(&[]), None);
    }

    #[test]
    fn an_argument_error_is_capped_however_large_the_value_quoted() {
        #[derive(Deserialize, JsonSchema)]
        struct Count {
            #[allow(dead_code)]
            n: u64,
        }
        let tool = RustTool::new(
            "count",
            "Count.",
            |c: Count| async move { Ok::<_, String>(c.n) },
        );
        let huge = json!({"n": "x".repeat(RESULT_CAP * 2)});
        let err = agent_runtime::Tool::validate(&tool, &huge).unwrap_err();
        assert!(
            err.starts_with("invalid arguments: invalid type: string"),
            "{}",
            &err[..60]
        );
        assert!(err.len() < RESULT_CAP + 100, "{}", err.len());
    }

    #[test]
    fn the_schema_is_derived_and_strict_when_it_can_be() {
        let tool = weather();
        let schema = tool.parameters();
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["properties"]["city"]["type"], "string");
        assert_eq!(schema["properties"]["city"]["description"], "The city.");
        assert_eq!(schema["required"], json!(["city"]));
        assert!(schema.get("$schema").is_none() && schema.get("title").is_none());
        assert!(tool.is_strict());
        let loose = RustTool::new("loose", "", |_: Loose| async { Ok::<_, String>("ok") });
        assert!(!loose.is_strict());
    }

    #[derive(Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    struct Forecast {
        city: String,
        days: Option<u8>,
        at: Option<Place>,
    }

    #[derive(Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    struct Place {
        lat: f64,
        label: Option<String>,
    }

    #[tokio::test]
    async fn optional_fields_are_sent_strict_as_required_nullables() {
        use agent_runtime::Tool as _;
        let tool = RustTool::new("forecast", "", |f: Forecast| async move {
            Ok::<_, String>(json!({"city": f.city, "days": f.days, "label":
                f.at.and_then(|p| p.label.map(|l| format!("{l}@{}", p.lat)))}))
        });
        assert!(tool.is_strict());
        let schema = tool.parameters();
        assert_eq!(schema["required"], json!(["city", "days", "at"]));
        let place = schema["$defs"]["Place"].clone();
        assert_eq!(place["required"], json!(["lat", "label"]));
        // What a strict model sends: every field, `null` for the absent ones.
        let args = json!({"city": "Oslo", "days": null, "at": {"lat": 59.9, "label": null}});
        assert_eq!(tool.validate(&args), Ok(()));
        let done = (tool.call)(args, a_call()).await;
        assert_eq!(
            done,
            Ok(json!({"city": "Oslo", "days": null, "label": null}))
        );
        let done = (tool.call)(
            json!({"city": "Oslo", "days": 3, "at": {"lat": 1.5, "label": "x"}}),
            a_call(),
        )
        .await;
        assert_eq!(
            done,
            Ok(json!({"city": "Oslo", "days": 3, "label": "x@1.5"}))
        );
    }

    #[tokio::test]
    async fn arguments_are_checked_and_results_and_errors_returned() {
        use agent_runtime::Tool as _;
        let tool = weather();
        assert_eq!(tool.validate(&json!({"city": "Oslo"})), Ok(()));
        let refused = tool.validate(&json!({"town": "Oslo"})).unwrap_err();
        assert!(refused.starts_with("invalid arguments"), "{refused}");
        assert!(tool.validate(&json!("Oslo")).is_err());
        let done = (tool.call)(json!({"city": "Oslo"}), a_call()).await;
        assert_eq!(done, Ok(json!({"city": "Oslo", "temp": 21})));
        let failed = (tool.call)(json!({"city": ""}), a_call()).await;
        assert_eq!(failed, Err(ToolFailure("no city given".into())));
        #[allow(clippy::panic)]
        let boom = RustTool::new("boom", "", |_: Weather| async move {
            if true {
                panic!("boom");
            }
            Ok::<_, String>(0)
        });
        let failed = (boom.call)(json!({"city": "x"}), a_call()).await;
        assert_eq!(failed, Err(ToolFailure("the tool panicked".into())));
    }

    #[test]
    fn policies_follow_the_run_and_the_config() {
        let tool = weather().policy(Policy::Ask);
        let config = ToolConfig::default();
        assert_eq!(
            tool.spec(ApprovalMode::Default, &config).policy,
            Policy::Ask
        );
        assert_eq!(tool.spec(ApprovalMode::Auto, &config).policy, Policy::Auto);
        assert_eq!(tool.spec(ApprovalMode::Deny, &config).policy, Policy::Deny);
        let reader = weather().read_only();
        assert_eq!(
            reader.spec(ApprovalMode::Deny, &config).policy,
            Policy::Auto
        );
        assert!(reader.spec(ApprovalMode::Deny, &config).retry_safe);
        let mut config = ToolConfig::default();
        config.policies.insert("weather".into(), Policy::Deny);
        assert_eq!(
            reader.spec(ApprovalMode::Default, &config).policy,
            Policy::Deny
        );
    }

    #[test]
    fn names_are_checked() {
        let tool = weather();
        assert_eq!(tool.name_problem(&["shell".into()]), None);
        assert!(tool.name_problem(&["weather".into()]).is_some());
        let bad = RustTool::new("a b", "", |_: Weather| async { Ok::<_, String>(0) });
        assert!(bad.name_problem(&[]).is_some());
        let mcp_like = RustTool::new("fs__read", "", |_: Weather| async { Ok::<_, String>(0) });
        assert!(mcp_like.name_problem(&[]).is_some());
    }
}
