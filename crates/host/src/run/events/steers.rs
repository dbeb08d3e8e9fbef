//! Events of what users give a run while it goes: steers, and compactions of its history.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::HostEvent;
use super::reasons::SteerVia;
use crate::run::kinds as k;

/// `steer.requested`: user input for the run, from any process (once per id).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SteerRequested {
    /// The steer's id.
    pub id: String,
    /// What the user said.
    #[serde(default)]
    pub text: String,
}

impl HostEvent for SteerRequested {
    const KIND: &'static str = k::STEER_REQUESTED;
    fn dedup_key(&self) -> Option<String> {
        Some(k::steer_key(&self.id))
    }
}

/// `steer.applied`: the driving host gave a steer to the model (a steer ends once).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SteerApplied {
    /// The steer's id.
    pub id: String,
    /// The step whose request first carried it.
    #[serde(default)]
    pub step: u64,
    /// The runtime turn's revision after it.
    #[serde(default)]
    pub revision: u64,
    /// Sent into a streaming response rather than at a step boundary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<SteerVia>,
    /// The response it steered, when `via` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_id: Option<String>,
}

impl HostEvent for SteerApplied {
    const KIND: &'static str = k::STEER_APPLIED;
    fn dedup_key(&self) -> Option<String> {
        Some(k::steer_end_key(&self.id))
    }
}

/// `steer.dropped`: a steer no host will apply (the run ended), and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SteerDropped {
    /// The steer's id.
    pub id: String,
    /// Why.
    #[serde(default)]
    pub reason: String,
}

impl HostEvent for SteerDropped {
    const KIND: &'static str = k::STEER_DROPPED;
    fn dedup_key(&self) -> Option<String> {
        Some(k::steer_end_key(&self.id))
    }
}

/// `context.compacted`: the history before `step` is replaced by the compact endpoint's
/// output (verbatim). A driving host's event also carries a checkpoint of its fold (read by
/// `checkpoint`, not here).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextCompacted {
    /// The first step whose request starts from `output`.
    pub step: u64,
    /// How many input items the output replaced.
    #[serde(default)]
    pub items_replaced: u64,
    /// The compaction's id.
    #[serde(default)]
    pub response_id: String,
    /// The compact endpoint's output items, verbatim.
    #[serde(default, deserialize_with = "agent_schema::json::list")]
    pub output: Vec<Value>,
    /// Steers already inside `output`.
    #[serde(default)]
    pub covered_steers: Vec<String>,
    /// Tokens the compaction used, as the endpoint reported them: they count toward the
    /// run's usage (and its `--max-tokens`) like a step's.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "agent_schema::json::option"
    )]
    pub usage: Option<Value>,
    /// The driving host's fold at this point, written by the driver (see `checkpoint`,
    /// which reads it); not read back here.
    #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<Value>,
    /// Read back: whether the event carries a checkpoint (without copying it).
    #[serde(
        skip_serializing,
        default,
        rename = "checkpoint",
        deserialize_with = "is_object"
    )]
    pub carries_checkpoint: bool,
}

/// Whether the value is an object, read without copying it.
fn is_object<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    struct IsObject;
    impl<'de> serde::de::Visitor<'de> for IsObject {
        type Value = bool;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("any JSON value")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
            while map
                .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                .is_some()
            {}
            Ok(true)
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
            while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
            Ok(false)
        }
        fn visit_unit<E>(self) -> Result<bool, E> {
            Ok(false)
        }
        fn visit_bool<E>(self, _: bool) -> Result<bool, E> {
            Ok(false)
        }
        fn visit_u64<E>(self, _: u64) -> Result<bool, E> {
            Ok(false)
        }
        fn visit_i64<E>(self, _: i64) -> Result<bool, E> {
            Ok(false)
        }
        fn visit_f64<E>(self, _: f64) -> Result<bool, E> {
            Ok(false)
        }
        fn visit_str<E>(self, _: &str) -> Result<bool, E> {
            Ok(false)
        }
    }
    d.deserialize_any(IsObject)
}

impl HostEvent for ContextCompacted {
    const KIND: &'static str = k::CONTEXT_COMPACTED;
    fn dedup_key(&self) -> Option<String> {
        Some(k::compacted_key(self.step))
    }
}
