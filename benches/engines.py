"""One adapter per engine, shared by every benchmark (MaskBench, the regex and index benchmarks).

Each adapter is built once per process from a :class:`common.TokenizerInfo` (the vocabulary or
tokenizer object is made outside every measurement) and exposes the same calls:

* ``compile_json_schema(schema)`` / ``compile_regex(pattern)`` → a compiled handle, or
  :class:`CompileError` when the engine refuses the input;
* ``matcher(handle)`` → a fresh matcher at the start (``handle`` stays reusable);
  ``first_matcher(handle)`` → the matcher for one use right after compiling (the handle itself
  where the engine's compiled object already is a matcher, so nothing is copied);
* ``fill(m)`` writes the next-token mask into the adapter's own one-row bitmask (the buffer type
  the engine's serving integration uses), readable as ``bits`` (numpy ``int32``, shape
  ``(1, ceil(vocab/32))``) and through ``allowed(token)``;
* ``advance(m, token) -> bool``, ``accepting(m) -> bool``, ``reset(m)``; ``eos``.

The engine packages are imported when an adapter is built: :func:`available` says whether one
is installed. Every call is the engine's own public API, made the way its documentation and its
serving integration make it; nothing is timed here (the benchmarks time ``fill`` and compiles).
"""

from __future__ import annotations

import importlib.util
import json
from typing import Any

import numpy as np
from common import TokenizerInfo

TS, LLG, XGR, OC = "tokensieve", "llguidance", "xgrammar", "outlines-core"
ENGINES = [TS, LLG, XGR, OC]
_PACKAGES = {TS: "tokensieve", LLG: "llguidance", XGR: "xgrammar", OC: "outlines_core"}


class CompileError(Exception):
    """The engine refused to compile the input (unsupported or invalid)."""


def available(engine: str) -> bool:
    """Whether the engine's package is installed."""
    return importlib.util.find_spec(_PACKAGES[engine]) is not None


def package(engine: str) -> str:
    """The engine's distribution name (for version reports)."""
    return _PACKAGES[engine]


class Engine:
    name: str
    eos: int
    bits: np.ndarray

    def compile_json_schema(self, schema: Any) -> Any:
        raise CompileError(f"{self.name} has no JSON Schema compiler here")

    def compile_regex(self, pattern: str) -> Any:
        raise CompileError(f"{self.name} has no regex compiler here")

    def matcher(self, handle: Any) -> Any:
        raise NotImplementedError

    def first_matcher(self, handle: Any) -> Any:
        return self.matcher(handle)

    def reset(self, m: Any) -> None:
        m.reset()

    def fill(self, m: Any) -> None:
        raise NotImplementedError

    def advance(self, m: Any, tok: int) -> bool:
        raise NotImplementedError

    def accepting(self, m: Any) -> bool:
        return bool(m.is_accepting())

    def allowed(self, tok: int) -> bool:
        return bool((int(self.bits[0, tok >> 5]) >> (tok & 31)) & 1)


class Tokensieve(Engine):
    """``Grammar`` + ``Matcher``; the bitmask from ``allocate_token_bitmask`` (torch when
    installed, as the serving adapters use)."""

    name = TS

    def __init__(self, info: TokenizerInfo, **options: Any) -> None:
        import tokensieve as ts

        self.ts = ts
        self.options = options  # compile options for every grammar (e.g. budgets)
        # the vocabulary as a user loads it: the tokenizer folder (its config names the EOS)
        self.vocab = ts.Vocabulary.from_pretrained(str(info.folder))
        self.eos = int(self.vocab.eos_token_ids[0])
        self.bm = ts.allocate_token_bitmask(1, self.vocab.vocab_size)
        self.bits = self.bm.numpy() if hasattr(self.bm, "numpy") else self.bm

    def compile_json_schema(self, schema: Any) -> Any:
        try:
            return self.ts.Grammar.from_json_schema(schema, self.vocab, **self.options)
        except self.ts.TokensieveError as e:
            raise CompileError(f"{type(e).__name__}: {e}") from None

    def compile_regex(self, pattern: str) -> Any:
        try:
            return self.ts.Grammar.from_regex(pattern, self.vocab, **self.options)
        except self.ts.TokensieveError as e:
            raise CompileError(f"{type(e).__name__}: {e}") from None

    def matcher(self, handle: Any) -> Any:
        return handle.matcher()

    def fill(self, m: Any) -> None:
        m.fill_next_token_bitmask(self.bm)

    def advance(self, m: Any, tok: int) -> bool:
        return bool(m.accept_token(tok))


class Llguidance(Engine):
    """``LLMatcher`` over ``LLTokenizer`` (what ``llguidance.hf.from_tokenizer`` builds from a
    transformers tokenizer); masks through ``llguidance.numpy``."""

    name = LLG

    def __init__(self, info: TokenizerInfo) -> None:
        import llguidance as llg
        import llguidance.numpy as llg_np

        self.llg, self.llg_np = llg, llg_np
        self.tok = llg.LLTokenizer(info.json_text, eos_token=info.eos_id)
        self.eos = info.eos_id
        self.bits = np.zeros((1, (self.tok.vocab_size + 31) // 32), dtype=np.int32)

    def _matcher(self, grammar: Any) -> Any:
        m = self.llg.LLMatcher(self.tok, grammar, log_level=0)
        if m.is_error():
            raise CompileError(m.get_error())
        return m

    def compile_json_schema(self, schema: Any) -> Any:
        return self._matcher(self.llg.LLMatcher.grammar_from_json_schema(schema))

    def compile_regex(self, pattern: str) -> Any:
        return self._matcher(self.llg.LLMatcher.grammar_from_regex(pattern))

    def matcher(self, handle: Any) -> Any:
        return handle.deep_copy()

    def first_matcher(self, handle: Any) -> Any:
        return handle

    def fill(self, m: Any) -> None:
        self.llg_np.fill_next_token_bitmask(m, self.bits, 0)

    def advance(self, m: Any, tok: int) -> bool:
        return bool(m.consume_token(tok))


class Xgrammar(Engine):
    """``GrammarCompiler`` from the transformers tokenizer; a torch bitmask (xgrammar's own
    allocation); JSON Schema in strict mode without free whitespace."""

    name = XGR

    def __init__(self, info: TokenizerInfo) -> None:
        import xgrammar as xgr
        from transformers import AutoTokenizer

        self.xgr = xgr
        hf = AutoTokenizer.from_pretrained(str(info.folder))
        ti = xgr.TokenizerInfo.from_huggingface(hf, vocab_size=info.size)
        self.compiler = xgr.GrammarCompiler(ti)
        self.eos = int(ti.stop_token_ids[0])
        self.bm = xgr.allocate_token_bitmask(1, ti.vocab_size)
        self.bits = self.bm.numpy()

    def compile_json_schema(self, schema: Any) -> Any:
        try:
            return self.compiler.compile_json_schema(
                json.dumps(schema), any_whitespace=False, strict_mode=True
            )
        except RuntimeError as e:
            raise CompileError(f"{type(e).__name__}: {e}") from None

    def compile_regex(self, pattern: str) -> Any:
        try:
            return self.compiler.compile_regex(pattern)
        except RuntimeError as e:
            raise CompileError(f"{type(e).__name__}: {e}") from None

    def matcher(self, handle: Any) -> Any:
        return self.xgr.GrammarMatcher(handle)

    def fill(self, m: Any) -> None:
        m.fill_next_token_bitmask(self.bm)

    def advance(self, m: Any, tok: int) -> bool:
        return bool(m.accept_token(tok))

    def accepting(self, m: Any) -> bool:
        self.fill(m)  # xgrammar has no such query: EOS in the mask
        return self.allowed(self.eos)


class OutlinesCore(Engine):
    """``Index`` over ``Vocabulary`` and a ``Guide`` per matcher; JSON Schema through
    ``build_regex_from_schema``; masks written into a numpy buffer."""

    name = OC

    def __init__(self, info: TokenizerInfo) -> None:
        import outlines_core as oc
        from outlines_core.json_schema import build_regex_from_schema

        self.oc, self.build_regex = oc, build_regex_from_schema
        self.vocab = oc.Vocabulary(info.eos_id, info.outlines_map())
        self.eos = info.eos_id
        self.bits = np.zeros((1, (info.size + 31) // 32), dtype=np.int32)

    def compile_json_schema(self, schema: Any) -> Any:
        try:
            regex = self.build_regex(json.dumps(schema))
        except Exception as e:  # noqa: BLE001 - schema not supported by the regex builder
            raise CompileError(f"{type(e).__name__}: {e}") from None
        return self.compile_regex(regex, what="Index: ")

    def compile_regex(self, pattern: str, what: str = "") -> Any:
        try:
            return self.oc.Index(pattern, self.vocab)
        except Exception as e:  # noqa: BLE001
            raise CompileError(f"{what}{type(e).__name__}: {e}") from None

    def matcher(self, handle: Any) -> Any:
        return self.oc.Guide(handle)

    def fill(self, m: Any) -> None:
        m.write_mask_into(self.bits.ctypes.data, self.bits.size, 4)

    def advance(self, m: Any, tok: int) -> bool:
        try:
            m.advance(tok, return_tokens=False)
        except Exception:  # noqa: BLE001
            return False
        return True

    def accepting(self, m: Any) -> bool:
        return bool(m.is_finished())


ADAPTERS: dict[str, type[Engine]] = {
    TS: Tokensieve,
    LLG: Llguidance,
    XGR: Xgrammar,
    OC: OutlinesCore,
}


def load(engine: str, info: TokenizerInfo, **options: Any) -> Engine:
    """The adapter for `engine` (options go to tokensieve's compiles)."""
    if engine == TS:
        return Tokensieve(info, **options)
    return ADAPTERS[engine](info)
