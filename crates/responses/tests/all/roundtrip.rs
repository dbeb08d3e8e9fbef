//! Real-shaped JSON goes through our types and comes back equal, unknowns included.

use agent_responses::types::{CreateResponse, Item, Response, StreamEvent, ToolDefinition};
use serde_json::{Value, json};

fn roundtrip<T: serde::de::DeserializeOwned + serde::Serialize>(value: &Value) -> Value {
    let typed: T = serde_json::from_value(value.clone()).expect("deserialize");
    serde_json::to_value(&typed).expect("serialize")
}

fn items() -> Value {
    json!([
        {"role": "user", "content": "查 api 和 ui"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi", "prompt_cache_breakpoint": {"mode": "explicit"}}]},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "thinking"}], "encrypted_content": "gAAAAB...", "status": null},
        {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant", "phase": "final_answer",
         "content": [{"type": "output_text", "text": "Hi", "annotations": [], "logprobs": []}, {"type": "refusal", "refusal": "no"}, {"type": "future_part", "x": 1}]},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "scan", "arguments": "{\"module\":\"api\"}", "status": "completed",
         "caller": {"type": "program", "caller_id": "call_prog"}, "async": null, "namespace": null},
        {"type": "function_call", "call_id": "call_2", "name": "scan", "arguments": "{}", "async": true, "caller": null},
        {"type": "function_call_output", "call_id": "call_1", "output": "{\"ok\":true}", "caller": {"type": "program", "caller_id": "call_prog"}},
        {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "part"}], "status": "completed"},
        {"type": "program", "id": "prog_1", "call_id": "call_prog", "code": "text('x')", "fingerprint": "fp_1"},
        {"type": "program_output", "id": "po_1", "call_id": "call_prog", "result": "x", "status": "completed"},
        {"type": "compaction", "id": "cmp_1", "encrypted_content": "opaque", "created_by": "server"},
        {"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_9", "name": "run_sql", "input": "SELECT 1", "namespace": null, "caller": null, "async": null},
        {"type": "custom_tool_call_output", "call_id": "call_9", "output": "1 row"},
        {"type": "item_reference", "id": "msg_0"},
        {"type": "brand_new_item", "id": "new_1", "payload": {"deep": [1, 2, {"x": null}]}}
    ])
}

#[test]
fn every_item_type_round_trips_verbatim() {
    let items = items();
    for item in items.as_array().unwrap() {
        assert_eq!(&roundtrip::<Item>(item), item);
    }
    let parsed: Vec<Item> = serde_json::from_value(items.clone()).unwrap();
    assert!(matches!(parsed[0], Item::Message(ref m) if !m.typed));
    assert!(matches!(parsed[4], Item::FunctionCall(_)));
    assert!(matches!(parsed[13], Item::Other(_)));
    assert!(matches!(parsed[14], Item::Other(_)));
}

#[test]
fn request_with_tools_and_unknown_fields_round_trips() {
    let request = json!({
        "model": "gpt-6-astra", "store": false, "instructions": null, "input": items(),
        "include": ["reasoning.encrypted_content"], "tool_choice": {"type": "programmatic_tool_calling"},
        "tools": [
            {"type": "function", "name": "scan", "description": "d", "strict": true,
             "parameters": {"type": "object", "properties": {}}, "allowed_callers": ["programmatic"],
             "output_schema": {"type": "object"}, "defer_loading": false},
            {"type": "function", "name": "slow", "parameters": null, "strict": null, "async": true},
            {"type": "programmatic_tool_calling"},
            {"type": "custom", "name": "run_sql", "format": {"type": "text"}, "async": false},
            {"type": "web_search", "filters": null}
        ],
        "reasoning": {"effort": "high"}, "future_option": {"a": [1]}
    });
    assert_eq!(roundtrip::<CreateResponse>(&request), request);
    let typed: CreateResponse = serde_json::from_value(request).unwrap();
    let tools = typed.tools.unwrap();
    assert!(tools[1].is_async());
    assert!(matches!(
        tools[2],
        ToolDefinition::ProgrammaticToolCalling(_)
    ));
    assert!(matches!(tools[4], ToolDefinition::Other(_)));
}

#[test]
fn response_and_events_round_trip() {
    let response = json!({
        "id": "resp_1", "object": "response", "created_at": 1741476542, "status": "completed",
        "completed_at": 1741476543, "error": null, "incomplete_details": null, "instructions": null,
        "model": "gpt-5.4", "output": items(), "parallel_tool_calls": true, "store": true,
        "usage": {"input_tokens": 36, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                  "output_tokens": 87, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 123},
        "input_transformations": [], "metadata": {}
    });
    assert_eq!(roundtrip::<Response>(&response), response);
    let events = json!([
        {"type": "response.created", "sequence_number": 0, "response": response},
        {"type": "response.output_item.added", "sequence_number": 1, "output_index": 0, "item": {"type": "function_call", "id": "fc_1", "call_id": "c", "name": "scan", "arguments": "", "status": "in_progress"}},
        {"type": "response.function_call_arguments.delta", "sequence_number": 2, "item_id": "fc_1", "output_index": 0, "delta": "{", "obfuscation": "abc"},
        {"type": "response.function_call_arguments.done", "sequence_number": 3, "item_id": "fc_1", "output_index": 0, "arguments": "{}", "name": "scan"},
        {"type": "response.content_part.added", "sequence_number": 4, "item_id": "msg_1", "output_index": 1, "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}},
        {"type": "response.output_text.delta", "sequence_number": 5, "item_id": "msg_1", "output_index": 1, "content_index": 0, "delta": "Hi", "logprobs": []},
        {"type": "response.output_text.done", "sequence_number": 6, "item_id": "msg_1", "output_index": 1, "content_index": 0, "text": "Hi", "logprobs": []},
        {"type": "response.reasoning_summary_part.added", "sequence_number": 7, "item_id": "rs_1", "output_index": 2, "summary_index": 0, "part": {"type": "summary_text", "text": ""}},
        {"type": "response.compaction.compacting", "sequence_number": 8, "item_id": "cmp_1", "output_index": 3},
        {"type": "response.steer.accepted", "sequence_number": 9, "steer": {"id": "steer_1"}},
        {"type": "error", "sequence_number": 10, "error": {"type": "too_many_requests", "code": "too_many_requests", "message": "Too Many Requests", "param": null}},
        {"type": "error", "sequence_number": 11, "code": "ERR", "message": "flat", "param": null},
        {"type": "response.completed", "sequence_number": 12, "response": response}
    ]);
    for event in events.as_array().unwrap() {
        assert_eq!(&roundtrip::<StreamEvent>(event), event, "{event}");
    }
    let steer: StreamEvent = serde_json::from_value(events[9].clone()).unwrap();
    assert!(matches!(steer, StreamEvent::Other(_)));
    assert_eq!(steer.sequence_number(), Some(9));
}

#[test]
fn malformed_known_items_are_errors_not_panics() {
    let bad = json!({"type": "function_call", "call_id": 5});
    let err = serde_json::from_value::<Item>(bad).unwrap_err().to_string();
    assert!(err.contains("function_call"), "{err}");
    assert!(serde_json::from_value::<Item>(json!("just a string")).is_err());
}
