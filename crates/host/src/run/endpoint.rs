//! Where a run's model calls go, as `run.created` records it (never a key), and which
//! endpoint a resumed run uses.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::HostError;

/// A run's model endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// The Responses API at this base URL.
    Url(String),
    /// The emulator, in the host's process, playing its built-in story.
    Mock,
    /// The emulator, in the host's process, playing this script.
    MockScript(PathBuf),
}

impl Endpoint {
    /// The endpoint as `run.created` records it: a URL's password masked, a script's path
    /// made absolute (so a resume from another directory finds it).
    pub fn recorded(&self) -> Endpoint {
        match self {
            Endpoint::Url(url) => Endpoint::Url(agent_redact::redact_url(url)),
            Endpoint::Mock => Endpoint::Mock,
            Endpoint::MockScript(path) => {
                Endpoint::MockScript(path.canonicalize().unwrap_or_else(|_| path.clone()))
            }
        }
    }

    /// The endpoint a resumed run calls: `given` when the user named one, else the one the
    /// run recorded (its history goes nowhere else), else the default API (`None`). A
    /// recorded URL that carried a password was journaled masked and must be given again.
    pub fn for_resume(
        given: Option<Endpoint>,
        recorded: Option<&Endpoint>,
    ) -> Result<Option<Endpoint>, HostError> {
        match (given, recorded) {
            (Some(given), _) => Ok(Some(given)),
            (None, Some(Endpoint::Url(url))) if url.contains(agent_redact::MASK) => {
                Err(HostError::EndpointMasked)
            }
            (None, recorded) => Ok(recorded.cloned()),
        }
    }

    /// The text `run.created.endpoint` holds: the URL, `mock`, or `mock:PATH`.
    pub fn to_text(&self) -> String {
        match self {
            Endpoint::Url(url) => url.clone(),
            Endpoint::Mock => "mock".into(),
            Endpoint::MockScript(path) => format!("mock:{}", path.display()),
        }
    }

    /// Reads what [`to_text`](Self::to_text) wrote.
    pub fn from_text(text: &str) -> Endpoint {
        match text.strip_prefix("mock:") {
            Some(path) => Endpoint::MockScript(PathBuf::from(path)),
            None if text == "mock" => Endpoint::Mock,
            None => Endpoint::Url(text.to_string()),
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_text())
    }
}

impl Serialize for Endpoint {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_text())
    }
}

impl<'de> Deserialize<'de> for Endpoint {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = std::borrow::Cow::<'de, str>::deserialize(d)?;
        Ok(Endpoint::from_text(&text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recorded_text_reads_back() {
        for endpoint in [
            Endpoint::Mock,
            Endpoint::MockScript(PathBuf::from("/x/s.json")),
            Endpoint::Url("http://127.0.0.1:9/v1".into()),
        ] {
            let text = serde_json::to_string(&endpoint).unwrap();
            assert_eq!(serde_json::from_str::<Endpoint>(&text).unwrap(), endpoint);
        }
        assert_eq!(
            serde_json::to_string(&Endpoint::MockScript("/x/s.json".into())).unwrap(),
            "\"mock:/x/s.json\""
        );
    }

    #[test]
    fn a_resume_uses_the_given_endpoint_else_the_recorded_one() {
        let recorded = Endpoint::Url("http://h/v1".into());
        assert_eq!(
            Endpoint::for_resume(None, Some(&recorded)).unwrap(),
            Some(recorded.clone())
        );
        assert_eq!(
            Endpoint::for_resume(Some(Endpoint::Mock), Some(&recorded)).unwrap(),
            Some(Endpoint::Mock)
        );
        let masked = Endpoint::Url("http://u:pw@h/v1".into()).recorded();
        assert!(matches!(
            Endpoint::for_resume(None, Some(&masked)),
            Err(HostError::EndpointMasked)
        ));
        assert_eq!(Endpoint::for_resume(None, None).unwrap(), None);
    }
}
