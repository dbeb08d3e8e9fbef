//! Serde plumbing for `type`-tagged unions that keep unknown variants verbatim.
//!
//! Invariant: deserialising then serialising any JSON object yields an equal object
//! (known variants keep their unknown fields in `extra`; unknown variants are kept whole).

use serde::{Deserialize, Deserializer, Serialize};

/// Serialises `inner` with a leading `"type": kind` field (omitted when `kind` is `None`).
#[derive(Serialize)]
pub(crate) struct Tagged<'a, T: Serialize> {
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    #[serde(flatten)]
    pub inner: &'a T,
}

/// Whether a variant's struct writes its `type` tag; only "easy" input messages omit it.
pub trait EmitsTag {
    /// Whether serialising writes `type` (false only for a value read without one).
    fn emits_tag(&self) -> bool {
        true
    }
    /// Called when the value was read without a `type` field.
    fn mark_untyped(&mut self) {}
}

/// Deserialises a field that distinguishes "absent" (`None`) from `null` (`Some(None)`).
pub(crate) fn nullable<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// A field that may be absent (`None`), `null` (`Some(None)`) or set (`Some(Some(v))`).
pub type Nullable<T> = Option<Option<T>>;

/// Defines an enum tagged by a JSON `type` field with an `Other(Value)` fallback.
macro_rules! tagged_union {
    (
        $(#[$meta:meta])*
        pub enum $name:ident $(untyped = $untyped:literal)? {
            $( $(#[$vmeta:meta])* $variant:ident($ty:ty) = $tag:literal, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq)]
        pub enum $name {
            $( $(#[$vmeta])* $variant($ty), )*
            /// A type this crate does not know; kept and sent back verbatim.
            Other(serde_json::Value),
        }

        impl $name {
            /// The wire `type` of this value (`None` for an untyped "easy" value).
            pub fn type_name(&self) -> Option<&str> {
                match self {
                    $( $name::$variant(inner) => {
                        if $crate::types::tagged::EmitsTag::emits_tag(inner) { Some($tag) } else { None }
                    } )*
                    $name::Other(value) => value.get("type").and_then(serde_json::Value::as_str),
                }
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                match self {
                    $( $name::$variant(inner) => {
                        let kind = if $crate::types::tagged::EmitsTag::emits_tag(inner) { Some($tag) } else { None };
                        serde::Serialize::serialize(&$crate::types::tagged::Tagged { kind, inner }, s)
                    } )*
                    $name::Other(value) => serde::Serialize::serialize(value, s),
                }
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                use serde::de::Error as _;
                let mut map = <serde_json::Map<String, serde_json::Value> as serde::Deserialize>::deserialize(d)?;
                let untyped = !map.contains_key("type");
                #[allow(unused_mut)]
                let mut kind: Option<String> = match map.get("type") {
                    Some(serde_json::Value::String(s)) => Some(s.clone()),
                    _ => None,
                };
                $( if kind.is_none() && !map.contains_key("type") { kind = Some($untyped.to_owned()); } )?
                match kind.as_deref() {
                    $( Some($tag) => {
                        map.remove("type");
                        serde_json::from_value::<$ty>(serde_json::Value::Object(map))
                            .map(|mut v| {
                                if untyped { $crate::types::tagged::EmitsTag::mark_untyped(&mut v); }
                                $name::$variant(v)
                            })
                            .map_err(|e| D::Error::custom(format!("invalid `{}` {}: {e}", $tag, stringify!($name))))
                    } )*
                    _ => Ok($name::Other(serde_json::Value::Object(map))),
                }
            }
        }
    };
}
pub(crate) use tagged_union;
