//! Structured output: a run whose final answer must be JSON matching a JSON Schema.
//!
//! Invariants:
//! - An [`OutputSchema`] holds a schema that compiles (checked by [`OutputSchema::new`]),
//!   whose root is an object schema (the API takes no other); it is recorded in
//!   `run.created`, so a resumed run checks its answer against the same schema.
//! - The schema goes to the model as `text.format` (`json_schema`), `strict` exactly when
//!   every object in it is closed and requires all its properties (the API's rule).
//! - [`OutputSchema::check`] is a pure function of the answer's text: a resumed run that
//!   checks the same answer again reaches the same verdict, so an `output.rejected` is
//!   neither lost nor doubled by a crash.
//! - A [`Rejection`] is bounded whatever the answer: at most [`Rejection::MAX_ERRORS`]
//!   errors of at most [`Rejection::MAX_ERROR_LEN`] bytes each, then how many more there
//!   were, so its `output.rejected` always fits in the journal and the retry proceeds.

use agent_responses::types::JsonSchemaFormat;
use agent_responses::types::text_format::{strict_schema_problem, valid_format_name};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The schema a run's final answer must match, and how often the model may try again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputSchema {
    /// The format's name sent to the API.
    pub name: String,
    /// The JSON Schema.
    pub schema: Value,
    /// Whether the schema is sent `strict` (it follows the API's strict rules).
    pub strict: bool,
    /// How many times an answer that does not match is sent back with its errors before
    /// the run fails.
    pub retries: u32,
}

/// A schema that cannot be an output schema.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OutputSchemaError {
    /// The text is not JSON.
    #[error("the output schema is not JSON: {0}")]
    NotJson(String),
    /// Not a valid JSON Schema.
    #[error("the output schema is not a valid JSON Schema: {0}")]
    Invalid(String),
    /// The root is not an object schema (`"type": "object"`), which the API requires.
    #[error(
        "the output schema's root must be {{\"type\": \"object\", ...}} (the API takes no other), got {0}"
    )]
    RootNotObject(String),
    /// The name is not 1 to 64 of `a-zA-Z0-9_-`.
    #[error("the output schema's name {0:?} must be 1 to 64 of a-z, A-Z, 0-9, _ and -")]
    BadName(String),
    /// Nested deeper than a request can carry it (the request's own objects hold it).
    #[error(
        "the output schema nests arrays and objects {0} deep; a request carries at most {max}",
        max = OutputSchema::MAX_NESTING
    )]
    TooDeep(usize),
}

/// Why a final answer was not accepted: each error on its own line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// What is wrong, one message per error (`/path: message`): the first
    /// [`MAX_ERRORS`](Self::MAX_ERRORS), each cut at [`MAX_ERROR_LEN`](Self::MAX_ERROR_LEN)
    /// bytes, then `and N more errors` when there were more.
    pub errors: Vec<String>,
}

impl Rejection {
    /// The errors listed; the rest are counted.
    pub const MAX_ERRORS: usize = 20;
    /// The bytes kept of one error (an error quotes the value it is about, which can be
    /// the whole answer).
    pub const MAX_ERROR_LEN: usize = 500;

    /// A rejection listing the first of `errors` and counting the rest.
    fn bounded(errors: impl Iterator<Item = String>) -> Rejection {
        let mut errors = errors.peekable();
        let mut listed: Vec<String> = errors
            .by_ref()
            .take(Self::MAX_ERRORS)
            .map(|e| cut(e, Self::MAX_ERROR_LEN))
            .collect();
        let more = errors.count();
        if more > 0 {
            listed.push(format!(
                "and {more} more {}",
                if more == 1 { "error" } else { "errors" }
            ));
        }
        Rejection { errors: listed }
    }
}

/// `text` cut to at most `max` bytes (on a character boundary), saying how much was cut.
fn cut(mut text: String, max: usize) -> String {
    if let Some(dropped) = crate::tools::result_cap::truncate(&mut text, max) {
        text.push_str(&format!("... ({dropped} more bytes)"));
    }
    text
}

impl OutputSchema {
    /// The name sent when none is given.
    pub const DEFAULT_NAME: &str = "output";
    /// Retries when none are given.
    pub const DEFAULT_RETRIES: u32 = 2;
    /// The deepest schema a request can carry: JSON text nests at most
    /// [`agent_schema::json::MAX_NESTING`] deep to be read back (by the API, the emulator
    /// and a resume), and the request's body, `text` and `format` objects hold the schema.
    pub const MAX_NESTING: usize = agent_schema::json::MAX_NESTING - 3;

    /// An output schema from `schema`, named [`DEFAULT_NAME`](Self::DEFAULT_NAME), with
    /// [`DEFAULT_RETRIES`](Self::DEFAULT_RETRIES) retries; refused when it does not compile
    /// its root is not an object schema, or it nests deeper than
    /// [`MAX_NESTING`](Self::MAX_NESTING).
    ///
    /// ```
    /// use agent_host::run::OutputSchema;
    /// let schema = OutputSchema::new(serde_json::json!({
    ///     "type": "object", "additionalProperties": false,
    ///     "properties": {"n": {"type": "integer"}}, "required": ["n"]}))?;
    /// assert!(schema.strict);
    /// assert_eq!(schema.check(r#"{"n": 3}"#), Ok(serde_json::json!({"n": 3})));
    /// assert!(schema.check(r#"{"n": "three"}"#).is_err());
    /// # Ok::<(), agent_host::run::OutputSchemaError>(())
    /// ```
    pub fn new(schema: Value) -> Result<OutputSchema, OutputSchemaError> {
        let depth = nesting(&schema);
        if depth > Self::MAX_NESTING {
            return Err(OutputSchemaError::TooDeep(depth));
        }
        jsonschema::validator_for(&schema)
            .map_err(|err| OutputSchemaError::Invalid(err.to_string()))?;
        let root_type = schema.get("type");
        if root_type != Some(&Value::String("object".into())) {
            let got = root_type.map_or_else(|| "no \"type\"".to_string(), Value::to_string);
            return Err(OutputSchemaError::RootNotObject(got));
        }
        Ok(OutputSchema {
            name: Self::DEFAULT_NAME.into(),
            strict: strict_schema_problem(&schema).is_none(),
            schema,
            retries: Self::DEFAULT_RETRIES,
        })
    }

    /// [`new`](Self::new) from JSON text (a schema file's content).
    pub fn from_json(text: &str) -> Result<OutputSchema, OutputSchemaError> {
        let schema = agent_schema::json::from_str(text)
            .map_err(|e| OutputSchemaError::NotJson(e.to_string()))?;
        OutputSchema::new(schema)
    }

    /// The same schema sent under `name`.
    pub fn name(mut self, name: impl Into<String>) -> Result<OutputSchema, OutputSchemaError> {
        let name = name.into();
        if !valid_format_name(&name) {
            return Err(OutputSchemaError::BadName(name));
        }
        self.name = name;
        Ok(self)
    }

    /// The same schema with `retries` retries.
    pub fn retries(mut self, retries: u32) -> OutputSchema {
        self.retries = retries;
        self
    }

    /// The request's `text.format`.
    pub fn format(&self) -> JsonSchemaFormat {
        JsonSchemaFormat {
            kind: "json_schema".into(),
            name: self.name.clone(),
            schema: self.schema.clone(),
            strict: Some(self.strict),
        }
    }

    /// The answer `text` parsed, when it is JSON that matches the schema; otherwise every
    /// error found.
    ///
    /// What is checked is what a run delivers ([`RunCompleted::answer`]: the text as
    /// written): only JSON's own whitespace may surround it, its objects are read as
    /// written, and none may repeat a key (readers differ on which value it holds).
    ///
    /// [`RunCompleted::answer`]: crate::run::events::RunCompleted::answer
    pub fn check(&self, text: &str) -> Result<Value, Rejection> {
        let value = match agent_schema::json::from_str_unique_keys(text) {
            Ok(value) => value,
            Err(err) => {
                return Err(Rejection::bounded(std::iter::once(format!(
                    "the answer is not JSON: {err}"
                ))));
            }
        };
        let validator = match jsonschema::validator_for(&self.schema) {
            Ok(validator) => validator,
            // Checked when the schema was made; a journal edited since is reported, not
            // trusted.
            Err(err) => {
                return Err(Rejection::bounded(std::iter::once(format!(
                    "the output schema does not compile: {err}"
                ))));
            }
        };
        let mut errors = validator
            .iter_errors(&value)
            .map(|err| {
                let path = err.instance_path().to_string();
                let path = if path.is_empty() { "/".into() } else { path };
                format!("{path}: {err}")
            })
            .peekable();
        if errors.peek().is_none() {
            drop(errors);
            return Ok(value);
        }
        Err(Rejection::bounded(errors))
    }
}

/// How deep `value` nests arrays and objects (a scalar is 0), walked without recursion: a
/// tree built in memory can be deeper than any stack.
fn nesting(value: &Value) -> usize {
    let mut deepest = 0;
    let mut pending = vec![(value, 0usize)];
    while let Some((value, depth)) = pending.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match value {
            Value::Array(items) => Box::new(items.iter()),
            Value::Object(map) => Box::new(map.values()),
            _ => continue,
        };
        deepest = deepest.max(depth + 1);
        pending.extend(children.map(|child| (child, depth + 1)));
    }
    deepest
}

/// What the model is told when its answer was rejected: a user message after the answer.
pub(crate) fn rejection_message(errors: &[String]) -> String {
    let mut text =
        String::from("Your final answer does not match the required JSON schema (text.format):\n");
    for error in errors {
        text.push_str("- ");
        text.push_str(error);
        text.push('\n');
    }
    text.push_str("Answer again with only a JSON value that matches the schema.");
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> OutputSchema {
        OutputSchema::new(json!({"type": "object", "properties": {
            "city": {"type": "string"}, "temp": {"type": "number"}}, "required": ["city", "temp"]}))
        .unwrap()
    }

    #[test]
    fn an_open_schema_is_sent_not_strict() {
        let s = schema();
        assert!(!s.strict);
        let format = serde_json::to_value(s.format()).unwrap();
        assert_eq!(format["type"], "json_schema");
        assert_eq!(format["name"], "output");
        assert_eq!(format["strict"], false);
    }

    #[test]
    fn what_is_checked_is_what_a_run_delivers() {
        let bugs = OutputSchema::new(json!({"type": "object",
            "properties": {"bugs": {"type": "integer"}}, "required": ["bugs"]}))
        .unwrap();
        // Only JSON's whitespace around it: what passes is what `answer` can deliver.
        for text in ["{\"bugs\": 3}", " \n{\"bugs\": 3}\r\n\t"] {
            assert_eq!(bugs.check(text), Ok(json!({"bugs": 3})), "{text:?}");
            assert!(crate::RawJson::compacted(text).is_some(), "{text:?}");
        }
        for text in ["{\"bugs\": 3}\u{a0}", "\u{3000}{\"bugs\": 3}"] {
            let rejected = bugs.check(text).unwrap_err();
            assert!(rejected.errors[0].contains("not JSON"), "{rejected:?}");
        }
        // serde_json alone reads this object as the integer 3; delivered, it is an object.
        let magic = r#"{"bugs": {"$serde_json::private::RawValue": "3"}}"#;
        let rejected = bugs.check(magic).unwrap_err();
        assert!(rejected.errors[0].starts_with("/bugs:"), "{rejected:?}");
        // Which `bugs` a reader sees depends on the reader.
        let rejected = bugs.check(r#"{"bugs": "three", "bugs": 3}"#).unwrap_err();
        assert!(rejected.errors[0].contains("duplicate key"), "{rejected:?}");
    }

    #[test]
    fn a_schema_deeper_than_a_request_carries_is_refused() {
        let nested = |depth: usize| {
            let (mut schema, mut levels) = match depth % 2 {
                0 => (json!({"type": "object", "properties": {}}), 2),
                _ => (json!({"type": "object"}), 1),
            };
            // Each wrap adds two levels: the object schema and its `properties`.
            while levels < depth {
                schema = json!({"type": "object", "properties": {"a": schema}});
                levels += 2;
            }
            schema
        };
        let deepest = nested(OutputSchema::MAX_NESTING);
        assert_eq!(nesting(&deepest), OutputSchema::MAX_NESTING);
        let schema = OutputSchema::new(deepest).unwrap();
        // Carried by a request as JSON text, it reads back.
        let request = json!({"model": "m", "text": {"format": schema.format()}});
        let text = serde_json::to_string(&request).unwrap();
        assert!(serde_json::from_str::<Value>(&text).is_ok());
        let deeper = nested(OutputSchema::MAX_NESTING + 2);
        assert_eq!(
            OutputSchema::new(deeper),
            Err(OutputSchemaError::TooDeep(OutputSchema::MAX_NESTING + 2))
        );
    }

    #[test]
    fn every_error_is_listed_with_its_path() {
        let rejected = schema().check(r#"{"city": 3}"#).unwrap_err();
        assert_eq!(rejected.errors.len(), 2, "{:?}", rejected.errors);
        assert!(rejected.errors.iter().any(|e| e.starts_with("/city:")));
        assert!(rejected.errors.iter().any(|e| e.contains("temp")));
        let not_json = schema().check("It is 20 degrees in Paris").unwrap_err();
        assert!(
            not_json.errors[0].contains("not JSON"),
            "{:?}",
            not_json.errors
        );
        assert_eq!(
            schema().check(" {\"city\": \"Paris\", \"temp\": 20.5}\n"),
            Ok(json!({"city": "Paris", "temp": 20.5}))
        );
    }

    #[test]
    fn a_rejection_is_bounded_however_many_errors() {
        let schema = OutputSchema::new(json!({"type": "object",
            "properties": {"a": {"type": "array", "items": {"type": "integer"}}},
            "required": ["a"]}))
        .unwrap();
        let answer = json!({"a": vec!["x"; 150_000]}).to_string();
        let rejected = schema.check(&answer).unwrap_err();
        assert_eq!(rejected.errors.len(), Rejection::MAX_ERRORS + 1);
        assert_eq!(
            rejected.errors.last().map(String::as_str),
            Some("and 149980 more errors")
        );
        assert!(
            rejected.errors[0].starts_with("/a/0:"),
            "{:?}",
            rejected.errors
        );
        // One error that quotes a huge value is cut, on a character boundary.
        let answer = json!({"a": "é".repeat(1_000_000)}).to_string();
        let rejected = schema.check(&answer).unwrap_err();
        assert_eq!(rejected.errors.len(), 1);
        assert!(rejected.errors[0].len() < Rejection::MAX_ERROR_LEN + 40);
        assert!(
            rejected.errors[0].ends_with("more bytes)"),
            "{}",
            rejected.errors[0]
        );
        let message = rejection_message(&rejected.errors);
        assert!(message.len() < 1_000, "{message}");
    }

    #[test]
    fn malformed_schemas_are_refused() {
        assert!(matches!(
            OutputSchema::new(json!({"type": "objekt"})),
            Err(OutputSchemaError::Invalid(_))
        ));
        assert!(matches!(
            OutputSchema::new(json!({"type": "array", "items": {}})),
            Err(OutputSchemaError::RootNotObject(_))
        ));
        assert!(matches!(
            OutputSchema::from_json("{nope"),
            Err(OutputSchemaError::NotJson(_))
        ));
        assert!(matches!(
            schema().name("bad name"),
            Err(OutputSchemaError::BadName(_))
        ));
    }

    #[test]
    fn the_message_lists_each_error() {
        let text = rejection_message(&["/a: x".into(), "/b: y".into()]);
        assert!(text.contains("- /a: x\n- /b: y\n"), "{text}");
    }
}
