"""The official `openai` Python SDK against the agentctl Responses emulator.

Run by `cargo xtask interop openai-sdk`, which starts `agentctl mock serve` with
script.json and sets OPENAI_BASE_URL / OPENAI_API_KEY / MOCK_ADMIN_URL.
"""
import json
import os
import urllib.request

import openai
import pytest

BASE = os.environ["OPENAI_BASE_URL"]
KEY = os.environ["OPENAI_API_KEY"]
MODEL = "gpt-6-astra"


def client(**kwargs):
    return openai.OpenAI(base_url=BASE, api_key=kwargs.pop("api_key", KEY), **kwargs)


def recorded():
    admin = os.environ["MOCK_ADMIN_URL"]
    # The emulator runs with --require-key: its inspection route needs the key too.
    request = urllib.request.Request(
        admin + "/__mock/requests", headers={"Authorization": f"Bearer {KEY}"}
    )
    with urllib.request.urlopen(request) as response:
        return json.load(response)


def attempts_with(marker):
    return [r for r in recorded() if marker in json.dumps(r.get("body"))]


def test_plain_create():
    response = client().responses.create(model=MODEL, input="hello from the SDK")
    assert response.status == "completed"
    assert response.output_text == "Echo: hello from the SDK"
    assert response.id.startswith("resp_")
    assert response.usage.input_tokens_details.cache_write_tokens == 0
    assert client().responses.retrieve(response.id).id == response.id


def test_stream_helper_checks_event_order():
    seen = []
    with client().responses.stream(model=MODEL, input="stream me please") as stream:
        for event in stream:
            seen.append(event.type)
        final = stream.get_final_response()
    assert seen[0] == "response.created" and seen[-1] == "response.completed"
    assert "response.output_text.delta" in seen
    assert final.output_text == "Echo: stream me please"


def test_raw_stream_sequence_numbers():
    events = list(client().responses.create(model=MODEL, input="numbers", stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_nested_error_event_raises_api_error():
    with pytest.raises(openai.APIError) as info:
        for _ in client().responses.create(model=MODEL, input="marker-stream-error", stream=True):
            pass
    assert "scripted to fail" in str(info.value)


TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather for a city", "strict": True,
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                         "required": ["city"], "additionalProperties": False}}]


def test_function_call_round_trip_stateless_and_chained():
    c = client()
    history = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = c.responses.create(model=MODEL, input=history, tools=TOOLS, store=False,
                               include=["reasoning.encrypted_content"])
    calls = [item for item in first.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather"
    assert json.loads(calls[0].arguments) == {"city": "Paris"}
    history += [item.model_dump(exclude_none=True) for item in first.output]
    history.append({"type": "function_call_output", "call_id": calls[0].call_id, "output": "22C and sunny"})
    second = c.responses.create(model=MODEL, input=history, tools=TOOLS, store=False)
    assert second.output_text == "The tool says: 22C and sunny"

    stored = c.responses.create(model=MODEL, input="What is the weather in Paris?", tools=TOOLS)
    call = next(item for item in stored.output if item.type == "function_call")
    chained = c.responses.create(model=MODEL, previous_response_id=stored.id, tools=TOOLS,
                                 input=[{"type": "function_call_output", "call_id": call.call_id, "output": "18C"}])
    assert chained.output_text == "The tool says: 18C"


def test_validation_errors_are_bad_request_errors():
    with pytest.raises(openai.BadRequestError) as info:
        client().responses.create(model=MODEL, input=[
            {"type": "function_call_output", "call_id": "call_orphan", "output": "x"}])
    assert info.value.status_code == 400
    assert info.value.message.endswith("No tool call found for function call output with call_id call_orphan.")
    assert info.value.param == "input"
    assert info.value.request_id.startswith("req_")
    with pytest.raises(openai.BadRequestError) as info:
        client().responses.create(model=MODEL, input="x", previous_response_id="resp_missing")
    assert info.value.code == "previous_response_not_found"


def test_wrong_key_is_authentication_error():
    with pytest.raises(openai.AuthenticationError) as info:
        client(api_key="sk-wrong").responses.create(model=MODEL, input="hi")
    assert info.value.status_code == 401
    assert info.value.code == "invalid_api_key"


def test_compact():
    c = client()
    history = [{"role": "user", "content": "Constraints: stdlib only, read-only."}]
    first = c.responses.create(model=MODEL, input=history, store=False)
    history += [item.model_dump(exclude_none=True) for item in first.output]
    compacted = c.responses.compact(model=MODEL, input=history)
    assert compacted.object == "response.compaction"
    assert compacted.output[-1].type == "compaction"
    follow = c.responses.create(model=MODEL, store=False, input=[
        *[item.model_dump(exclude_none=True) for item in compacted.output],
        {"role": "user", "content": "continue"}])
    assert follow.output_text == "Echo: continue"


def test_429_with_retry_after_is_retried():
    raw = client().responses.with_raw_response.create(model=MODEL, input="marker-429-once")
    assert raw.retries_taken == 1
    assert raw.parse().output_text == "Echo: marker-429-once"
    counts = [r["headers"].get("x-stainless-retry-count") for r in attempts_with("marker-429-once")]
    assert counts == ["0", "1"]


def test_persistent_429_raises_rate_limit_error_after_retries():
    with pytest.raises(openai.RateLimitError) as info:
        client(max_retries=2).responses.create(model=MODEL, input="marker-429-always")
    assert info.value.status_code == 429
    assert info.value.code == "rate_limit_exceeded"
    assert len(attempts_with("marker-429-always")) == 3


def test_500_is_retried_then_succeeds():
    raw = client().responses.with_raw_response.create(model=MODEL, input="marker-500-once")
    assert raw.retries_taken == 1
    assert raw.parse().output_text == "Echo: marker-500-once"


def test_500_with_x_should_retry_false_is_not_retried():
    with pytest.raises(openai.InternalServerError) as info:
        client().responses.create(model=MODEL, input="marker-500-noretry")
    assert info.value.status_code == 500
    assert len(attempts_with("marker-500-noretry")) == 1
