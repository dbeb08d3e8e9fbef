"""The OpenAI Agents SDK side of `cargo xtask bench host`.

Runs the scripted tool loop of `fixtures/responses/bench-host.json` against the emulator with
`openai-agents` (pinned in requirements.txt): an Agent with one no-op function tool
`list_dir`, `OpenAIResponsesModel` over an `AsyncOpenAI(base_url=...)` client, driven by
`Runner.run(..., max_turns=...)`. Prints JSON lines like `bench_host.rs`.

Modes (argv: MODE ...):
  single STEPS REPEAT SESSION   SESSION: "none" or "sqlite" (a SQLiteSession file per run)
  concurrent STEPS RUNS         asyncio.gather of RUNS Runner.run, no session
Environment: OPENAI_BASE_URL (the emulator, .../v1), OPENAI_API_KEY (any non-empty key).
"""

import asyncio
import json
import os
import resource
import sys
import tempfile
import time

from openai import AsyncOpenAI, Timeout
from agents import (
    Agent,
    OpenAIResponsesModel,
    Runner,
    SQLiteSession,
    function_tool,
    set_tracing_disabled,
)

FINAL_ANSWER = "BENCH-DONE"


@function_tool
def list_dir(path: str) -> str:
    """List a directory of the workspace (a no-op: the workspace is empty)."""
    return "(empty)"


def prompt(steps: int) -> str:
    return f"loop={steps}; call list_dir until told otherwise"


def make_agent(client: AsyncOpenAI) -> Agent:
    model = OpenAIResponsesModel(model="gpt-5.1", openai_client=client)
    return Agent(name="bench", instructions=None, model=model, tools=[list_dir])


def vm_hwm_kib() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def vm_rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def model_steps(result) -> int:
    return sum(1 for _ in result.raw_responses)


async def single(steps: int, repeat: int, session_kind: str) -> None:
    client = AsyncOpenAI(base_url=os.environ["OPENAI_BASE_URL"], max_retries=0)
    agent = make_agent(client)
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(repeat):
            session = None
            if session_kind == "sqlite":
                session = SQLiteSession(f"bench-{i}", os.path.join(tmp, f"session-{i}.db"))
            t = time.perf_counter()
            result = await Runner.run(agent, prompt(steps), max_turns=steps + 10, session=session)
            secs = time.perf_counter() - t
            n = model_steps(result)
            ok = FINAL_ANSWER in str(result.final_output)
            print(json.dumps({"bench": "single", "label": f"sdk_{session_kind}", "repeat": i,
                              "tool_steps": steps, "model_steps": n, "secs": secs,
                              "steps_per_s": n / secs, "ok": ok}), flush=True)
            if session is not None:
                session.close()


async def concurrent(steps: int, runs: int) -> None:
    # The client's default connect timeout (5 s) is shorter than the wait of a connection
    # opened while a thousand coroutines hold the event loop: most runs would end in
    # `APITimeoutError` before their first step. The whole-request timeout stays the default.
    timeout = Timeout(timeout=600.0, connect=600.0)
    client = AsyncOpenAI(base_url=os.environ["OPENAI_BASE_URL"], max_retries=0, timeout=timeout)
    agent = make_agent(client)
    rss_before = vm_rss_kib()
    t = time.perf_counter()
    results = await asyncio.gather(
        *(Runner.run(agent, prompt(steps), max_turns=steps + 10) for _ in range(runs)),
        return_exceptions=True,
    )
    secs = time.perf_counter() - t
    total = 0
    ok = 0
    errors = []
    for r in results:
        if isinstance(r, BaseException):
            errors.append(repr(r)[:200])
            continue
        total += model_steps(r)
        ok += int(FINAL_ANSWER in str(r.final_output))
    hwm = vm_hwm_kib()
    print(json.dumps({"bench": "concurrent", "label": "sdk_none", "runs": runs,
                      "tool_steps": steps, "model_steps": total, "secs": secs,
                      "steps_per_s": total / secs, "ok": ok, "vm_hwm_kib": hwm,
                      "rss_before_kib": rss_before, "hwm_per_run_kib": hwm / runs,
                      "hwm_above_start_per_run_kib": max(hwm - rss_before, 0) / runs,
                      "errors": errors[:3]}), flush=True)


def main() -> None:
    set_tracing_disabled(True)
    mode = sys.argv[1]
    if mode == "single":
        asyncio.run(single(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]))
    elif mode == "concurrent":
        asyncio.run(concurrent(int(sys.argv[2]), int(sys.argv[3])))
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
