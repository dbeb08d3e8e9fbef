"""Official openai Python SDK, WebSocket mode, against the agentctl emulator.

The SDK's own client (`client.responses.connect()`, needs `openai[realtime]>=3.8`) opens
`ws://.../v1/responses`, creates a response, steers it once it exists, and must see
`response.steer.accepted`, the parent ending `incomplete` (reason `steered`) and the
successor (`previous_response_id` = parent) completing with the steering applied.

The emulator's base URL and key come from OPENAI_BASE_URL / OPENAI_API_KEY, as for the
other cases of this suite (the xtask `openai-sdk` suite starts the emulator and sets them).
"""

import os
import signal

import pytest

openai = pytest.importorskip("openai")

PROMPT = "为面试练习设计一个任务管理工具，列出功能和交付计划。"
STEER = "新增约束：一个人两天完成，只保留最小功能。"


def _client():
    base = os.environ.get("OPENAI_BASE_URL")
    if not base:
        pytest.fail("OPENAI_BASE_URL must point at the emulator (http://127.0.0.1:PORT/v1)")
    return openai.OpenAI(base_url=base, api_key=os.environ.get("OPENAI_API_KEY", "sk-mock-agentctl"), max_retries=0)


class _Watchdog:
    """Fails the test instead of hanging if the emulator never answers."""

    def __init__(self, seconds):
        self.seconds = seconds

    def __enter__(self):
        def expire(signum, frame):
            raise TimeoutError(f"no terminal event within {self.seconds}s; steering outcome unknown")

        self.previous = signal.signal(signal.SIGALRM, expire)
        signal.alarm(self.seconds)
        return self

    def __exit__(self, *exc):
        signal.alarm(0)
        signal.signal(signal.SIGALRM, self.previous)
        return False


def test_websocket_create_steer_successor():
    client = _client()
    seen = []
    parent = successor = None
    final_text = None
    with _Watchdog(60), client.responses.connect() as connection:
        connection.response.create(model="gpt-6-astra", input=PROMPT, stream_id="interop_1")
        for event in connection:
            seen.append(event.type)
            if event.type == "response.created":
                if parent is None:
                    parent = event.response.id
                    connection.response.steer(input=STEER, previous_response_id=parent)
                else:
                    successor = event.response.id
                    assert event.response.previous_response_id == parent
            elif event.type == "response.steer.accepted":
                assert event.steer.previous_response_id == parent
                assert event.steer.id
            elif event.type == "response.incomplete":
                assert event.response.id == parent
                assert event.response.incomplete_details.reason == "steered"
            elif event.type in ("response.steer.failed", "response.steer.pending", "response.failed", "error"):
                pytest.fail(f"unexpected {event.type}: {event}")
            elif event.type == "response.completed" and event.response.id == successor:
                final_text = event.response.output_text
                break
    assert "response.steer.accepted" in seen
    assert seen.index("response.steer.accepted") < seen.index("response.incomplete")
    assert successor and successor != parent
    assert STEER in final_text


def test_websocket_steer_failed_code_is_typed():
    client = _client()
    with _Watchdog(60), client.responses.connect() as connection:
        connection.response.steer(input="late", previous_response_id="resp_does_not_exist")
        event = connection.recv()
        assert event.type == "response.steer.failed"
        assert event.error.code == "response_not_found"
        assert event.steer.previous_response_id == "resp_does_not_exist"
