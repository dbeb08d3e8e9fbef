//! How a script's `reply` object is read: exactly one of `items`, `json`, `error`, `echo`,
//! and the fields that go with it. An unknown field (a misspelt `stauts`) or a field that
//! goes with another kind of reply (`status` beside `json`) is refused, not ignored, which
//! an untagged enum would have done.

use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::{ErrorReply, Reply};

/// A `reply` object as written, before its kind is known.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawReply {
    #[serde(default)]
    items: Option<Vec<Value>>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    delta_chars: Option<usize>,
    #[serde(default)]
    text_deltas: Option<bool>,
    /// `Some(Value::Null)` for `"json": null` (an answer of `null`), `None` when absent.
    #[serde(default, deserialize_with = "present")]
    json: Option<Value>,
    #[serde(default)]
    error: Option<ErrorReply>,
    #[serde(default)]
    echo: Option<bool>,
}

fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// Why a `reply` object is not one reply.
#[derive(Debug, thiserror::Error)]
pub(super) enum ShapeError {
    /// None or several of `items`, `json`, `error`, `echo`.
    #[error("reply must have exactly one of `items`, `json`, `error` or `echo`, not {0}")]
    Kinds(String),
    /// A field of `items` replies beside another kind.
    #[error("reply.{field} goes with `items` only, not with `{kind}`")]
    Misplaced {
        /// The field.
        field: &'static str,
        /// The kind of reply it was written beside.
        kind: &'static str,
    },
    /// `echo: false`, which would echo all the same.
    #[error("reply.echo must be true (a rule that should not echo needs another reply)")]
    EchoFalse,
}

impl TryFrom<RawReply> for Reply {
    type Error = ShapeError;

    fn try_from(raw: RawReply) -> Result<Self, ShapeError> {
        let RawReply {
            items,
            status,
            delta_chars,
            text_deltas,
            json,
            error,
            echo,
        } = raw;
        let kinds: Vec<&str> = [
            ("items", items.is_some()),
            ("json", json.is_some()),
            ("error", error.is_some()),
            ("echo", echo.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, given)| given.then_some(name))
        .collect();
        let kind = match kinds.as_slice() {
            [kind] => *kind,
            [] => return Err(ShapeError::Kinds("none".into())),
            several => return Err(ShapeError::Kinds(several.join(" and "))),
        };
        if kind != "items" {
            let misplaced = [
                ("status", status.is_some()),
                ("delta_chars", delta_chars.is_some()),
                ("text_deltas", text_deltas.is_some()),
            ]
            .into_iter()
            .find_map(|(field, given)| given.then_some(field));
            if let Some(field) = misplaced {
                return Err(ShapeError::Misplaced { field, kind });
            }
        }
        Ok(match (items, json, error, echo) {
            (Some(items), ..) => Reply::Items {
                items,
                status: status.unwrap_or_else(super::completed),
                delta_chars,
                text_deltas: text_deltas.unwrap_or(true),
            },
            (_, Some(json), ..) => Reply::Json { json },
            (_, _, Some(error), _) => Reply::Error { error },
            (.., Some(false)) => return Err(ShapeError::EchoFalse),
            _ => Reply::Echo { echo: true },
        })
    }
}
