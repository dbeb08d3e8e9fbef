//! The emulator against its script document (`fixtures/responses/README.md`): a script a
//! user writes from it is served as it says, or refused at load with the rule and the field
//! named; never accepted and then served as something else.

use agent_responses_mock::{MockConfig, MockServer, Script, ScriptError};
use serde_json::{Value, json};

/// The load error of a script of one rule named `r` with these fields.
fn refused(rule: Value) -> String {
    let mut rule = rule;
    rule["name"] = json!("r");
    let text = json!({"rules": [rule]}).to_string();
    match Script::from_json_str(&text) {
        Err(ScriptError::Invalid(why)) => why,
        other => panic!("{rule}: expected an invalid script, got {other:?}"),
    }
}

fn assert_names(why: &str, words: &[&str]) {
    for word in words {
        assert!(why.contains(word), "`{word}` not in: {why}");
    }
}

fn items() -> Value {
    json!([{"type": "message", "content": [{"type": "output_text", "text": "hi"}]}])
}

#[test]
fn a_misspelt_or_misplaced_reply_field_is_refused_naming_rule_and_field() {
    let why = refused(json!({"reply": {"items": items(), "stauts": "failed"}}));
    assert_names(&why, &["rule `r`", "stauts"]);
    let why = refused(json!({"reply": {"json": {"a": 1}, "status": "failed"}}));
    assert_names(&why, &["rule `r`", "reply.status", "json"]);
    let why =
        refused(json!({"reply": {"error": {"status": 429, "message": "m"}, "delta_chars": 2}}));
    assert_names(&why, &["rule `r`", "reply.delta_chars", "error"]);
    let why = refused(json!({"reply": {"json": {"a": 1}, "items": items()}}));
    assert_names(&why, &["rule `r`", "items and json"]);
    let why = refused(json!({"reply": {}}));
    assert_names(&why, &["rule `r`", "exactly one of"]);
    let why = refused(json!({"reply": {"echo": false}}));
    assert_names(&why, &["rule `r`", "reply.echo"]);
    // A rule without a name is named by its place.
    let text = json!({"rules": [{"reply": {"echo": true}}, {"reply": {"itemz": []}}]}).to_string();
    match Script::from_json_str(&text) {
        Err(ScriptError::Invalid(why)) => assert_names(&why, &["rule 2", "itemz"]),
        other => panic!("expected an invalid script, got {other:?}"),
    }
    // What the document shows still loads, and `"json": null` is an answer of `null`.
    for reply in [
        json!({"items": items(), "status": "incomplete", "delta_chars": 3, "text_deltas": false}),
        json!({"json": null}),
        json!({"echo": true}),
        json!({"error": {"status": 500, "message": "m"}}),
    ] {
        let text = json!({"rules": [{"reply": reply}]}).to_string();
        let script = Script::from_json_str(&text).unwrap();
        let back = serde_json::to_string(&script).unwrap();
        assert_eq!(Script::from_json_str(&back).unwrap(), script, "{reply}");
    }
}

#[test]
fn a_status_no_response_ends_with_and_an_empty_delta_are_refused() {
    let why = refused(json!({"reply": {"items": items(), "status": "complete"}}));
    assert_names(
        &why,
        &["rule `r`", "reply.status", "completed, incomplete, failed"],
    );
    let why = refused(json!({"reply": {"items": items(), "delta_chars": 0}}));
    assert_names(&why, &["rule `r`", "reply.delta_chars"]);
}

#[test]
fn a_misspelt_placeholder_is_refused_and_other_braces_are_kept() {
    let text =
        |t: &str| json!([{"type": "message", "content": [{"type": "output_text", "text": t}]}]);
    for (written, meant) in [
        ("{{ last_user }}", "{{last_user}}"),
        ("{{Last_User}}", "{{last_user}}"),
        ("{{output}}", "{{outputs}}"),
    ] {
        let why = refused(json!({"reply": {"items": text(&format!("got {written}"))}}));
        assert_names(&why, &["rule `r`", written, meant]);
    }
    let why = refused(json!({"reply": {"json": {"a": ["{{lastUser}}"]}}}));
    assert_names(&why, &["rule `r`", "{{lastUser}}"]);
    // A template in a scripted answer is not a placeholder.
    let handlebars =
        json!({"rules": [{"reply": {"items": text("Hello {{name}}, {{last_user}}")}}]});
    assert!(Script::from_json_str(&handlebars.to_string()).is_ok());
}

#[test]
fn a_rule_that_can_never_answer_is_refused() {
    let why = refused(json!({"times": 0, "reply": {"echo": true}}));
    assert_names(&why, &["rule `r`", "times"]);
    let why = refused(json!({"when": {"text_format": "json"}, "reply": {"echo": true}}));
    assert_names(&why, &["rule `r`", "when.text_format", "json_schema"]);
    let why = refused(json!({"when": {"tool_outputs_below": 0}, "reply": {"echo": true}}));
    assert_names(&why, &["rule `r`", "when.tool_outputs_below"]);
    // Tool-output conditions that contradict each other, both named.
    for (when, names) in [
        (
            json!({"has_tool_outputs": false, "tool_outputs": 1}),
            ["when.has_tool_outputs", "when.tool_outputs: 1"],
        ),
        (
            json!({"has_tool_outputs": true, "tool_outputs": 0}),
            ["when.has_tool_outputs", "when.tool_outputs: 0"],
        ),
        (
            json!({"has_tool_outputs": true, "tool_outputs_below": 1}),
            ["when.has_tool_outputs", "when.tool_outputs_below"],
        ),
        (
            json!({"has_tool_outputs": true, "tool_outputs_total": 0}),
            ["when.has_tool_outputs", "when.tool_outputs_total"],
        ),
        (
            json!({"tool_outputs": 3, "tool_outputs_below": 3}),
            ["when.tool_outputs: 3", "when.tool_outputs_below"],
        ),
        (
            json!({"tool_outputs": 2, "tool_outputs_total": 1}),
            ["when.tool_outputs: 2", "when.tool_outputs_total"],
        ),
    ] {
        let why = refused(json!({"when": when, "reply": {"echo": true}}));
        assert_names(&why, &["rule `r`", names[0], names[1]]);
    }
    // Those that can answer load: no outputs is fewer than 1; compactions may stand for more.
    for when in [
        json!({"has_tool_outputs": false, "tool_outputs_below": 1}),
        json!({"has_tool_outputs": false, "tool_outputs": 0, "tool_outputs_total": 4}),
        json!({"has_tool_outputs": true, "tool_outputs": 1, "tool_outputs_below": 2}),
        json!({"has_tool_outputs": true, "tool_outputs": 2, "tool_outputs_below": 200,
            "tool_outputs_total": 2}),
        json!({"tool_outputs": 2, "tool_outputs_total": 5}),
    ] {
        let script = json!({"rules": [{"when": when, "reply": {"echo": true}}]});
        assert!(Script::from_json_str(&script.to_string()).is_ok(), "{when}");
    }
    let why =
        refused(json!({"when": {"endpoint": "compact", "stream": true}, "reply": {"echo": true}}));
    assert_names(&why, &["rule `r`", "when.stream"]);
    let why = refused(
        json!({"when": {"endpoint": "compact"}, "reply": {"items": []},
        "fault": {"after_events": 1, "kind": "cut"}}),
    );
    assert_names(&why, &["rule `r`", "fault", "compact"]);
    let why = refused(json!({"when": {"stream": false}, "reply": {"items": []},
        "fault": {"after_events": 1, "kind": "stall"}}));
    assert_names(&why, &["rule `r`", "fault", "stream"]);
    let why = refused(json!({"when": {"endpoint": "compact"}, "reply": {"json": {"a": 1}}}));
    assert_names(&why, &["rule `r`", "reply.json", "compact"]);
    let why = refused(json!({"reply": {"error": {"status": 500, "message": "m"}},
        "hold_for_steer_ms": 100}));
    assert_names(&why, &["rule `r`", "hold_for_steer_ms", "error"]);
    // A misspelt endpoint names its rule too (serde's error alone gives a column).
    let why = refused(json!({"when": {"endpoint": "compaction"}, "reply": {"echo": true}}));
    assert_names(&why, &["rule `r`", "compaction"]);
}

#[test]
fn fault_fields_must_belong_to_their_fault() {
    let fault = |f: Value| refused(json!({"reply": {"items": items()}, "fault": f}));
    let why = fault(json!({"after_events": 2, "kind": "gate"}));
    assert_names(&why, &["rule `r`", "fault.gate"]);
    let why = fault(json!({"after_events": 2, "kind": "error_event", "shape": "flt"}));
    assert_names(&why, &["rule `r`", "fault.shape", "flt"]);
    let why = fault(json!({"after_events": 2, "kind": "cut", "gate": "g"}));
    assert_names(&why, &["rule `r`", "fault.gate", "cut"]);
    let why = fault(json!({"after_events": 2, "kind": "stall", "every_ms": 50}));
    assert_names(&why, &["rule `r`", "fault.every_ms", "keep_alive"]);
    let why = fault(json!({"after_events": 2, "kind": "keep_alive", "every_ms": 0}));
    assert_names(&why, &["rule `r`", "fault.every_ms"]);
    for good in [
        json!({"after_events": 2, "kind": "gate", "gate": "g"}),
        json!({"after_events": 2, "kind": "error_event", "shape": "flat"}),
        json!({"after_events": 2, "kind": "keep_alive", "every_ms": 5}),
    ] {
        let text = json!({"rules": [{"reply": {"items": items()}, "fault": good}]}).to_string();
        assert!(Script::from_json_str(&text).is_ok(), "{good}");
    }
}

async fn post(server: &MockServer, body: Value) -> Value {
    reqwest::Client::new()
        .post(format!("{}/responses", server.base_url()))
        .bearer_auth("sk-test")
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

fn output_text(response: &Value) -> String {
    response["output"][0]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// `reply.json` with `{{last_user}}`: the user's text is a JSON string in the answer, so
/// the answer still parses when it holds quotes or line breaks.
#[tokio::test]
async fn a_json_reply_renders_its_placeholders_as_json_strings() {
    let script = Script::from_json_str(
        &json!({"rules": [{"reply": {"json": {"asked": "{{last_user}}", "n": 1}}}]}).to_string(),
    )
    .unwrap();
    let server = MockServer::start(MockConfig::new(script)).await.unwrap();
    let asked = "say \"hi\"\nand \\ go";
    let response = post(&server, json!({"model": "m", "input": asked})).await;
    let text = output_text(&response);
    let answer: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(answer, json!({"asked": asked, "n": 1}));
}

/// The echo reply is the user's text as written: a user who types `{{outputs}}` gets it
/// back, not the tool outputs.
#[tokio::test]
async fn an_echo_repeats_the_user_text_verbatim() {
    let script =
        Script::from_json_str(&json!({"rules": [{"reply": {"echo": true}}]}).to_string()).unwrap();
    let server = MockServer::start(MockConfig::new(script)).await.unwrap();
    let response = post(&server, json!({"model": "m", "input": "show {{outputs}}"})).await;
    assert_eq!(output_text(&response), "Echo: show {{outputs}}");
}

/// `input_has_type: "message"` matches a user message however it was sent: typed, as an
/// "easy" message without a `type`, or as a bare string.
#[tokio::test]
async fn a_message_matcher_matches_easy_and_string_inputs() {
    let script = Script::from_json_str(
        &json!({"rules": [{"when": {"input_has_type": "message"},
            "reply": {"items": [{"type": "message", "content": [{"type": "output_text", "text": "matched"}]}]}}]})
        .to_string(),
    )
    .unwrap();
    let server = MockServer::start(MockConfig::new(script)).await.unwrap();
    for input in [
        json!("a bare string"),
        json!([{"role": "user", "content": "easy"}]),
        json!([{"type": "message", "role": "user", "content": "typed"}]),
    ] {
        let response = post(&server, json!({"model": "m", "input": input})).await;
        assert_eq!(output_text(&response), "matched", "{input}");
    }
}

/// A scripted error's message takes the placeholders too, over both endpoints.
#[tokio::test]
async fn an_error_message_renders_its_placeholders() {
    let script = Script::from_json_str(
        &json!({"rules": [{"when": {"endpoint": "any"},
            "reply": {"error": {"status": 400, "message": "cannot do {{last_user}}"}}}]})
        .to_string(),
    )
    .unwrap();
    let server = MockServer::start(MockConfig::new(script)).await.unwrap();
    for path in ["responses", "responses/compact"] {
        let answer: Value = reqwest::Client::new()
            .post(format!("{}/{path}", server.base_url()))
            .bearer_auth("sk-test")
            .json(&json!({"model": "m", "input": "that"}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(answer["error"]["message"], "cannot do that", "{path}");
    }
}

mod ws {
    //! The WebSocket mode against the document: `hold_for_steer_ms` holds a reply at its
    //! first text delta or its function call's `output_item.added`, wherever in the reply
    //! that item is.

    use std::time::Duration;

    use agent_responses_mock::{MockConfig, MockServer, Script};
    use futures::{SinkExt as _, StreamExt as _};
    use serde_json::{Value, json};
    use tokio_tungstenite::tungstenite::Message;

    use crate::ws_client::{Socket, connect};

    async fn server(rule: Value) -> MockServer {
        let text = json!({"rules": [rule]}).to_string();
        MockServer::start(MockConfig::new(Script::from_json_str(&text).unwrap()))
            .await
            .unwrap()
    }

    async fn send(ws: &mut Socket, event: Value) {
        ws.send(Message::text(event.to_string())).await.unwrap();
    }

    /// Events until one of type `last` (included); fails after 10 s.
    async fn until(ws: &mut Socket, last: &[&str]) -> Vec<Value> {
        let mut seen = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), async {
            while let Some(Ok(message)) = ws.next().await {
                if let Message::Text(text) = message {
                    let event: Value = serde_json::from_str(&text).unwrap();
                    let done = last.contains(&event["type"].as_str().unwrap_or(""));
                    seen.push(event);
                    if done {
                        return;
                    }
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("no {last:?} in {seen:?}"));
        seen
    }

    fn create(input: &str) -> Value {
        json!({"type": "response.create", "model": "m", "input": input,
               "tools": [{"type": "function", "name": "scan", "parameters": {"type": "object"}}]})
    }

    /// Sends `create`, waits for `at`, steers the response: the events after it.
    async fn steer_at(ws: &mut Socket, at: &str) -> Vec<Value> {
        send(ws, create("plan it")).await;
        let started = until(ws, &[at]).await;
        let id = started[0]["response"]["id"].as_str().unwrap().to_owned();
        send(
            ws,
            json!({"type": "response.steer", "previous_response_id": id, "input": "two days only"}),
        )
        .await;
        until(
            ws,
            &[
                "response.steer.pending",
                "response.steer.failed",
                "error",
                "response.completed",
            ],
        )
        .await
    }

    /// A reasoning item before the message (as most scripted replies have): the steered
    /// parent ends with the reasoning and the message cut at its first delta, at the
    /// message's own output index.
    #[tokio::test]
    async fn a_held_message_after_reasoning_ends_steered_at_its_own_index() {
        let server = server(
            json!({"hold_for_steer_ms": 600000, "reply": {"delta_chars": 4, "items": [
            {"type": "reasoning", "summary": []},
            {"type": "message", "content": [{"type": "output_text", "text": "a long plan"}]}]}}),
        )
        .await;
        let mut ws = connect(&server).await;
        let after = steer_at(&mut ws, "response.output_text.delta").await;
        assert_eq!(after[0]["type"], "response.steer.accepted", "{after:?}");
        let done = after
            .iter()
            .find(|e| e["type"] == "response.output_item.done")
            .unwrap_or_else(|| panic!("{after:?}"));
        assert_eq!(done["output_index"], 1, "{done}");
        assert_eq!(done["item"]["type"], "message", "{done}");
        assert_eq!(done["item"]["content"][0]["text"], "a lo", "{done}");
        let ended = after
            .iter()
            .find(|e| e["type"] == "response.incomplete")
            .unwrap_or_else(|| panic!("{after:?}"));
        let kinds: Vec<&Value> = ended["response"]["output"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| &i["type"])
            .collect();
        assert_eq!(kinds, [&json!("reasoning"), &json!("message")], "{ended}");
        assert_eq!(ended["response"]["incomplete_details"]["reason"], "steered");
    }

    /// A reasoning item before the function call: the reply is held at the call's
    /// `output_item.added`, and the steer waits for the call's output.
    #[tokio::test]
    async fn a_held_call_after_reasoning_waits_for_its_output() {
        let server = server(json!({"hold_for_steer_ms": 600000, "reply": {"items": [
            {"type": "reasoning", "summary": []},
            {"type": "function_call", "call_id": "call_1", "name": "scan", "arguments": "{}"}]}}))
        .await;
        let mut ws = connect(&server).await;
        let mut after = steer_at(&mut ws, "response.output_item.added").await;
        // The reasoning's `output_item.added` came first; the call's is the hold. The
        // steer is accepted there, the call completes, then the steer waits for it.
        assert!(
            after.iter().any(|e| e["type"] == "response.steer.accepted"),
            "{after:?}"
        );
        after.extend(
            until(
                &mut ws,
                &["response.steer.pending", "response.steer.failed"],
            )
            .await,
        );
        let last = after.last().unwrap();
        assert_eq!(last["type"], "response.steer.pending", "{after:?}");
        assert_eq!(last["required_input"][0]["call_id"], "call_1", "{last}");
    }

    /// `fault.shape` is honoured over WebSocket as over HTTP: `flat` puts `code` and
    /// `message` at the top of the `error` event, `nested` (the default) under `error`.
    #[tokio::test]
    async fn an_error_event_fault_keeps_its_shape() {
        for (shape, flat) in [("flat", true), ("nested", false)] {
            let server = server(json!({"reply": {"items": [
                {"type": "message", "content": [{"type": "output_text", "text": "hi"}]}]},
                "fault": {"after_events": 3, "kind": "error_event", "shape": shape}}))
            .await;
            let mut ws = connect(&server).await;
            send(&mut ws, create("go")).await;
            let events = until(&mut ws, &["error"]).await;
            let error = events.last().unwrap();
            assert_eq!(error["code"].is_string(), flat, "{shape}: {error}");
            assert_eq!(error["error"].is_object(), !flat, "{shape}: {error}");
        }
    }
}
