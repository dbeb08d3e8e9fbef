//! WebSocket mode wire events
//! (<https://developers.openai.com/api/reference/resources/responses/websocket-events>).
//!
//! Client events: [`ClientEvent::Create`] (`response.create`) and [`ClientEvent::Steer`]
//! (`response.steer`). Server events: every streaming event of HTTP mode ([`StreamEvent`](crate::types::StreamEvent),
//! with `stream_id` and the WebSocket `error`'s `status` kept in `extra`), plus the three
//! steering events. Unknown server events are kept verbatim in [`StreamEvent::Other`](crate::types::StreamEvent::Other).
//!
//! The types live in three files: `client.rs` (what a client sends), `steer.rs` (the
//! steering events and their parts) and `server.rs` (every server frame); all are reachable
//! from here.

mod client;
mod server;
mod steer;

pub use client::{
    ClientEvent, ClientEventError, ResponseCreate, SteerInput, SteerRequest, valid_stream_id,
};
pub use server::ServerEvent;
pub use steer::{
    ApprovalStub, CallStub, RequiredInput, SteerAccepted, SteerError, SteerEvent, SteerFailCode,
    SteerFailed, SteerPending, SteerRef,
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{CreateResponse, Item, StreamEvent};
    use serde_json::Value;

    #[test]
    fn create_frame_has_lane_and_no_stream_flag() {
        let mut request = CreateResponse::new("m", crate::types::Input::Text("hi".into()));
        request.stream = Some(Some(true));
        let event = ClientEvent::Create(ResponseCreate {
            request,
            stream_id: Some("a".into()),
            generate: Some(false),
        });
        let json: Value = serde_json::from_str(&event.to_json().unwrap()).unwrap();
        assert_eq!(json["type"], "response.create");
        assert_eq!(json["stream_id"], "a");
        assert_eq!(json["generate"], false);
        assert!(json.get("stream").is_none());
        let back = ClientEvent::from_json(&json.to_string()).unwrap();
        let ClientEvent::Create(c) = back else {
            panic!()
        };
        assert_eq!(c.stream_id.as_deref(), Some("a"));
        assert_eq!(c.request.model, "m");
    }

    #[test]
    fn steer_frame_round_trips_and_rejects_extra_fields() {
        let event = ClientEvent::Steer(SteerRequest {
            previous_response_id: "resp_1".into(),
            input: SteerInput::Text("two days".into()),
        });
        let text = event.to_json().unwrap();
        assert_eq!(ClientEvent::from_json(&text).unwrap(), event);
        let bad =
            r#"{"type":"response.steer","previous_response_id":"r","input":"x","stream_id":"a"}"#;
        assert!(matches!(
            ClientEvent::from_json(bad),
            Err(ClientEventError::Field(_))
        ));
    }

    #[test]
    fn steer_input_rules() {
        assert!(SteerInput::Text(" ".into()).validate().is_err());
        assert!(SteerInput::Messages(vec![]).validate().is_err());
        let items: Vec<Item> =
            serde_json::from_str(r#"[{"type":"function_call_output","call_id":"c","output":"x"}]"#)
                .unwrap();
        assert!(SteerInput::Messages(items).validate().is_err());
        let items: Vec<Item> =
            serde_json::from_str(r#"[{"role":"user","content":"metric"}]"#).unwrap();
        assert!(SteerInput::Messages(items).validate().is_ok());
    }

    #[test]
    fn server_events_typed_and_unknown_kept() {
        let frames = [
            r#"{"type":"response.steer.accepted","sequence_number":12,"stream_id":"agent_1","steer":{"id":"steer_1","previous_response_id":"resp_active"}}"#,
            r#"{"type":"response.steer.pending","sequence_number":40,"steer":{"id":"steer_1","previous_response_id":"resp_active"},"reason":"waiting_for_required_input","required_input":[{"type":"function_call_output","call_id":"call_7","name":"get_weather"},{"type":"mcp_approval_response","approval_request_id":"a1"},{"type":"new_kind","x":1}]}"#,
            r#"{"type":"response.steer.failed","sequence_number":13,"steer":{"id":null,"previous_response_id":"resp_active","input":"Actually"},"error":{"type":"invalid_request_error","code":"response_already_completed","message":"done"}}"#,
            r#"{"type":"error","status":400,"stream_id":"agent_1","error":{"type":"invalid_request_error","code":"websocket_stream_limit_reached","message":"limit","param":"stream_id","headers":{"x-request-id":"r"}}}"#,
            r#"{"type":"response.brand_new","sequence_number":3,"payload":{"a":[1,2]}}"#,
        ];
        for frame in frames {
            let event = ServerEvent::from_json(frame).unwrap();
            let back: Value = serde_json::from_str(&event.to_json().unwrap()).unwrap();
            let original: Value = serde_json::from_str(frame).unwrap();
            assert_eq!(back, original, "{frame}");
        }
        let pending = ServerEvent::from_json(frames[1]).unwrap();
        let ServerEvent::Steer(SteerEvent::Pending(p)) = pending else {
            panic!()
        };
        assert!(
            matches!(&p.required_input[0], RequiredInput::FunctionCallOutput(s) if s.call_id == "call_7")
        );
        assert!(matches!(&p.required_input[2], RequiredInput::Other(_)));
        let failed = ServerEvent::from_json(frames[2]).unwrap();
        let ServerEvent::Steer(SteerEvent::Failed(f)) = failed else {
            panic!()
        };
        assert_eq!(f.code(), SteerFailCode::ResponseAlreadyCompleted);
        let error = ServerEvent::from_json(frames[3]).unwrap();
        assert_eq!(error.error_status(), Some(400));
        assert_eq!(error.stream_id(), Some("agent_1"));
        assert!(matches!(
            ServerEvent::from_json(frames[4]).unwrap(),
            ServerEvent::Stream(StreamEvent::Other(_))
        ));
    }

    #[test]
    fn stream_ids() {
        assert!(valid_stream_id("agent_1.x-y"));
        assert!(!valid_stream_id(""));
        assert!(!valid_stream_id("a b"));
        assert!(!valid_stream_id(&"a".repeat(257)));
    }
}
