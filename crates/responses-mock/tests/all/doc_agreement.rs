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
fn a_rule_that_can_never_answer_is_refused() {
    let why = refused(json!({"times": 0, "reply": {"echo": true}}));
    assert_names(&why, &["rule `r`", "times"]);
    let why = refused(json!({"when": {"text_format": "json"}, "reply": {"echo": true}}));
    assert_names(&why, &["rule `r`", "when.text_format", "json_schema"]);
    let why = refused(json!({"when": {"tool_outputs_below": 0}, "reply": {"echo": true}}));
    assert_names(&why, &["rule `r`", "when.tool_outputs_below"]);
    let why =
        refused(json!({"when": {"endpoint": "compact", "stream": true}, "reply": {"echo": true}}));
    assert_names(&why, &["rule `r`", "when.stream"]);
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
