"""The SGLang grammar backend: SGLang's ``BaseGrammarBackend`` and ``BaseGrammarObject`` over
tokensieve grammars and matchers. Imports SGLang (and torch); ``tokensieve.sglang`` does not.

* ``json`` requests (``json_schema``; ``response_format`` ``json_object`` arrives as the schema
  ``{"type": "object"}``; ``$$ANY$$`` is any JSON value), ``regex`` requests and ``ebnf``
  requests (GBNF/EBNF text, the grammar starting at ``root``, as xgrammar reads it; a grammar
  with no ``name ::= ...`` rule is Lark, starting at ``start``) compile with
  :class:`tokensieve.constraints.GrammarCache`; a compile error (``SchemaError``,
  ``RegexError``, ``GrammarError``, ``BudgetError``, ``UnspellableError``, a malformed value)
  is SGLang's ``InvalidGrammarObject`` carrying tokensieve's message, which SGLang returns to
  the client.
* ``structural_tag`` requests (the older ``{"structures": [...], "triggers": [...]}`` shape
  SGLang's tool calling sends, and the ``format`` shape) compile with
  ``Grammar.from_structural_tag``.
* ``full_assistant_ebnf`` (SGLang's whole-turn tool-call grammar for GLM models, which spells
  the model's special tokens) requests are refused with an ``InvalidGrammarObject`` that says
  tokensieve does not support them.
* Masks are tokensieve's (and xgrammar's) packed int32 layout ``[batch, ceil(vocab / 32)]`` over
  SGLang's logits width; :func:`tokensieve.apply_token_bitmask_inplace` applies them.
* Once the output is complete only EOS is allowed; accepting it terminates the grammar.
* With ``--reasoning-parser``, the backend is wrapped in SGLang's ``ReasonerGrammarBackend``
  (as SGLang does for its built-in backends), which leaves the reasoning free and starts the
  grammar after the think-end token.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from sglang.srt.constrained.base_grammar_backend import (
    BaseGrammarBackend,
    BaseGrammarObject,
    GrammarStats,
    InvalidGrammarObject,
    register_grammar_backend,
)

import tokensieve as ts
from tokensieve._core import TokensieveError
from tokensieve.constraints import SCHEMA_OPTIONS, Constraint, GrammarCache, describe_error

__all__ = [
    "FULL_ASSISTANT_EBNF_UNSUPPORTED",
    "TokensieveGrammar",
    "TokensieveGrammarBackend",
    "create_backend",
    "register_backend",
    "vocabulary_for_tokenizer",
]

logger = logging.getLogger("tokensieve.sglang")

FULL_ASSISTANT_EBNF_UNSUPPORTED = (
    "full_assistant_ebnf grammars are not supported by tokensieve: they spell the model's "
    "special tokens, which a tokensieve grammar never allows; it compiles JSON Schemas "
    "(json_schema, response_format), regexes and ebnf grammars; launch SGLang with "
    "--grammar-backend xgrammar for full_assistant_ebnf requests"
)
# SGLang's (and xgrammar's) key for "any JSON value"
ANY_JSON = "$$ANY$$"
_KEY_SHOWN = 200


def _shown_key(key_string: str) -> str:
    return key_string if len(key_string) <= _KEY_SHOWN else key_string[:_KEY_SHOWN] + "..."


class TokensieveGrammar(BaseGrammarObject):  # type: ignore[misc]
    """One request's grammar state: a tokensieve ``Matcher`` over a compiled ``Grammar``."""

    def __init__(
        self,
        grammar: ts.Grammar,
        key_string: str = "",
        grammar_stats: Any = None,
    ) -> None:
        super().__init__()
        self.grammar = grammar
        self.matcher = grammar.matcher()
        self.key_string = key_string
        self.grammar_stats = grammar_stats

    def accept_token(self, token: int) -> None:
        """Advance over ``token``; ``ValueError`` when the grammar does not allow it (SGLang
        aborts the request). Ignored once the grammar has terminated (EOS accepted)."""
        if self.matcher.is_finished():
            return
        self.current_token = token
        if not self.matcher.accept_token(int(token)):
            raise ValueError(
                f"tokensieve: token {token} is not allowed here (grammar "
                f"{_shown_key(self.key_string)!r}, {self.matcher.consumed} tokens accepted)"
            )

    def rollback(self, k: int) -> None:
        if k > 0:
            self.matcher.rollback(k)

    def is_terminated(self) -> bool:
        """True once EOS has been accepted."""
        return self.matcher.is_finished()

    def allocate_vocab_mask(self, vocab_size: int, batch_size: int, device: Any) -> Any:
        return allocate_vocab_mask(vocab_size, batch_size, device)

    def fill_vocab_mask(self, vocab_mask: Any, idx: int) -> None:
        self.matcher.fill_next_token_bitmask(vocab_mask, idx)

    @staticmethod
    def fill_vocab_mask_batched(entries: Sequence[Any], vocab_mask: Any) -> None:
        """One call for the batch's rows (without the GIL) when every entry is ours."""
        if entries and all(isinstance(e.grammar, TokensieveGrammar) for e in entries):
            ts.fill_next_token_bitmask(
                [e.grammar.matcher for e in entries], vocab_mask, [int(e.row) for e in entries]
            )
            return
        for e in entries:
            e.grammar.fill_vocab_mask(vocab_mask, e.row)

    @staticmethod
    def reset_vocab_mask(vocab_mask: Any) -> None:
        vocab_mask.fill_(-1)

    @staticmethod
    def move_vocab_mask(vocab_mask: Any, device: Any) -> Any:
        return move_vocab_mask(vocab_mask, device)

    @staticmethod
    def apply_vocab_mask(logits: Any, vocab_mask: Any) -> None:
        apply_vocab_mask(logits, vocab_mask)

    def copy(self) -> TokensieveGrammar:
        """A new request's grammar: the same compiled grammar, a new matcher at its start."""
        stats = self.grammar_stats
        if dataclasses.is_dataclass(stats) and not isinstance(stats, type):
            stats = dataclasses.replace(stats, is_cache_hit=True, tree_traversal_time=[])
        return TokensieveGrammar(self.grammar, self.key_string, stats)

    def try_jump_forward(self, tokenizer: Any) -> None:
        """No jump-forward: every token is sampled under the mask."""
        return None

    def __repr__(self) -> str:
        return (
            f"TokensieveGrammar(key={_shown_key(self.key_string)!r}, "
            f"consumed={self.matcher.consumed}, finished={self.matcher.is_finished()})"
        )


def allocate_vocab_mask(vocab_size: int, batch_size: int, device: Any = None) -> Any:
    """An int32 mask ``[batch_size, ceil(vocab_size / 32)]``, every bit set (rows left unfilled
    stay unconstrained), on the CPU, pinned when CUDA is there (the copy to the GPU is then
    asynchronous)."""
    words = ts.bitmask_words(int(vocab_size))
    pin = bool(torch.cuda.is_available())
    return torch.full((int(batch_size), words), -1, dtype=torch.int32, pin_memory=pin)


def move_vocab_mask(vocab_mask: Any, device: Any) -> Any:
    return vocab_mask.to(device, non_blocking=True)


def apply_vocab_mask(logits: Any, vocab_mask: Any) -> None:
    """Disallowed logits to ``-inf`` in place (tokensieve's kernel: triton on CUDA, Rust on the
    CPU, torch elsewhere)."""
    ts.apply_token_bitmask_inplace(logits, vocab_mask)


def set_token_filter(
    vocab_mask: Any,
    token_ids: Iterable[int],
    batch_idx: int,
    is_allowed: bool = True,
    reset_vocab_mask: bool = True,
) -> None:
    """SGLang's strict-thinking filter: allow (or forbid) ``token_ids`` in row ``batch_idx``,
    after clearing the row to nothing allowed (everything allowed) when ``reset_vocab_mask``."""
    row = vocab_mask[batch_idx]
    if reset_vocab_mask:
        row.fill_(0 if is_allowed else -1)
    words: dict[int, int] = {}
    for t in token_ids:
        t = int(t)
        if 0 <= t < row.shape[0] * 32:
            words[t // 32] = words.get(t // 32, 0) | (1 << (t % 32))
    for word, bits in words.items():
        signed = bits - (1 << 32) if bits >= 1 << 31 else bits  # as an int32
        if is_allowed:
            row[word] = int(row[word]) | signed
        else:
            row[word] = int(row[word]) & ~signed


def vocabulary_for_tokenizer(
    tokenizer: Any, vocab_size: int, eos_token_ids: Any = None
) -> ts.Vocabulary:
    """The engine's vocabulary: SGLang's tokenizer (a ``transformers`` fast tokenizer, a
    wrapper holding one, or a tokenizer.json path/folder) over the logits width ``vocab_size``.

    EOS ids are SGLang's (``model_config.hf_eos_token_id``: an int, a set or ``None``) and the
    tokenizer's ``eos_token_id``; ids past ``vocab_size`` are left out."""
    eos: list[int] = []
    if isinstance(eos_token_ids, int):
        eos.append(eos_token_ids)
    elif eos_token_ids is not None:
        eos.extend(sorted(int(e) for e in eos_token_ids))
    tok_eos = getattr(tokenizer, "eos_token_id", None)
    if isinstance(tok_eos, int) and tok_eos not in eos:
        eos.append(tok_eos)
    eos = [e for e in eos if 0 <= e < vocab_size]
    source: Any = tokenizer
    if not isinstance(tokenizer, str) and getattr(tokenizer, "backend_tokenizer", None) is None:
        inner = getattr(tokenizer, "tokenizer", None)
        if inner is not None and getattr(inner, "backend_tokenizer", None) is not None:
            source = inner
        elif getattr(tokenizer, "name_or_path", None):
            source = tokenizer.name_or_path  # a local folder holding tokenizer.json
    vocab = ts.Vocabulary.from_pretrained(
        source, vocab_size=int(vocab_size), eos_token_ids=eos or None
    )
    logger.info(
        "tokensieve: vocabulary of %d ids (%d from the tokenizer), kind %s, EOS %s",
        vocab.vocab_size,
        vocab.tokenizer_size,
        vocab.kind,
        vocab.eos_token_ids,
    )
    return vocab


class TokensieveGrammarBackend(BaseGrammarBackend):  # type: ignore[misc]
    """SGLang's grammar backend interface over tokensieve.

    ``vocab`` is built from ``tokenizer`` unless given. ``json_options`` are tokensieve
    JSON Schema options (``whitespace``, ``max_whitespace``, ...) for every ``json`` request;
    ``options`` engine options (``max_compile_seconds``, ``max_states``, ...) for every
    request."""

    def __init__(
        self,
        tokenizer: Any,
        vocab_size: int,
        eos_token_ids: Any = None,
        *,
        vocab: ts.Vocabulary | None = None,
        json_options: dict[str, Any] | None = None,
        options: dict[str, Any] | None = None,
        cache_size: int = 256,
    ) -> None:
        super().__init__()
        self.vocab = (
            vocab
            if vocab is not None
            else vocabulary_for_tokenizer(tokenizer, vocab_size, eos_token_ids)
        )
        self.vocab_size = int(vocab_size)
        if self.vocab.vocab_size != self.vocab_size:
            raise ValueError(
                f"tokensieve: the vocabulary has {self.vocab.vocab_size} ids but SGLang's "
                f"logits have {self.vocab_size}"
            )
        self.options = dict(options or {})
        self.json_options = {**self.options, **(json_options or {})}
        self.grammars = GrammarCache(cache_size)

    # masks, also used by SGLang's reasoner wrapper when a request has no grammar
    @staticmethod
    def allocate_vocab_mask(vocab_size: int, batch_size: int, device: Any) -> Any:
        return allocate_vocab_mask(vocab_size, batch_size, device)

    @staticmethod
    def move_vocab_mask(vocab_mask: Any, device: Any) -> Any:
        return move_vocab_mask(vocab_mask, device)

    @staticmethod
    def apply_vocab_mask(logits: Any, vocab_mask: Any) -> None:
        apply_vocab_mask(logits, vocab_mask)

    @property
    def is_support_token_filter(self) -> bool:
        return True

    @staticmethod
    def set_token_filter(
        vocab_mask: Any,
        token_ids: Iterable[int],
        batch_idx: int,
        is_allowed: bool = True,
        reset_vocab_mask: bool = True,
    ) -> None:
        set_token_filter(vocab_mask, token_ids, batch_idx, is_allowed, reset_vocab_mask)

    def _compile(
        self, kind: str, value: Any, options: dict[str, Any], label: str, key_string: str
    ) -> Any:
        try:
            constraint = Constraint.make(kind, value, options, label=label)
            grammar = self.grammars.get(constraint, self.vocab)
        except (ValueError, TokensieveError) as e:
            if isinstance(e, TokensieveError):  # raised by Constraint.make (a schema too deep)
                message = describe_error(Constraint(kind, None, (), label), e)
            else:
                message = str(e) or f"invalid {label}"
            logger.warning("tokensieve: %s refused: %s", label, message)
            return InvalidGrammarObject(message)
        except Exception as e:  # not an input error: still the request's alone
            message = describe_error(Constraint(kind, None, (), label), e)
            logger.exception("tokensieve: %s failed to compile", label)
            return InvalidGrammarObject(message)
        return TokensieveGrammar(grammar, key_string, GrammarStats(dispatch_type=label))

    def dispatch_json(self, key_string: str) -> Any:
        value = "{}" if key_string == ANY_JSON else key_string
        return self._compile("json_schema", value, self.json_options, "json_schema", key_string)

    def dispatch_regex(self, key_string: str) -> Any:
        return self._compile("regex", key_string, self.options, "regex", key_string)

    def dispatch_ebnf(self, key_string: str) -> Any:
        return self._compile("ebnf", key_string, self.options, "ebnf", key_string)

    def _init_value_dispatch(self, key: Any, require_reasoning: bool) -> Any:
        # SGLang hands ebnf and full_assistant_ebnf alike to dispatch_ebnf; only the key says
        # which it is
        if isinstance(key, tuple) and key and key[0] == "full_assistant_ebnf":
            return InvalidGrammarObject(FULL_ASSISTANT_EBNF_UNSUPPORTED)
        return super()._init_value_dispatch(key, require_reasoning)

    def dispatch_structural_tag(self, key_string: str) -> Any:
        return self._compile(
            "structural_tag", key_string, self.json_options, "structural_tag", key_string
        )

    def reset(self) -> None:
        super().reset()
        self.grammars.clear()


def _serving(name: str, default: Any) -> Any:
    """A serving option of the running server (``get_serving()``), or ``default``."""
    try:
        from sglang.srt.runtime_context import get_serving

        return getattr(get_serving(), name, default)
    except Exception:
        return default


def json_options_from_server() -> dict[str, Any]:
    """tokensieve's JSON whitespace from SGLang's ``--constrained-json-*`` flags: a whitespace
    pattern as given; ``--constrained-json-disable-any-whitespace``: ``compact``;
    ``--constrained-json-max-whitespace-cnt N``: ``flexible`` with at most N; otherwise
    tokensieve's ``default`` (``json.dumps`` spacing or compact)."""
    pattern = _serving("constrained_json_whitespace_pattern", None)
    if isinstance(pattern, str) and pattern:
        return {"whitespace": pattern}
    if _serving("constrained_json_disable_any_whitespace", False):
        return {"whitespace": "compact"}
    count = _serving("constrained_json_max_whitespace_cnt", None)
    if isinstance(count, int) and count >= 0:
        return {"whitespace": "flexible", "max_whitespace": count}
    return {}


# A JSON object of tokensieve JSON Schema options for every `json` request of an SGLang server
# (SGLang has no per-request options and no flags for them), e.g. '{"property_order": "any"}'.
JSON_OPTIONS_ENV = "TOKENSIEVE_JSON_OPTIONS"


def json_options_from_env() -> dict[str, Any]:
    """The options in ``TOKENSIEVE_JSON_OPTIONS`` (none when it is unset or empty); a value
    that is not a JSON object of tokensieve's JSON Schema option names is a ``ValueError`` at
    startup, naming the variable (the option values are checked by the first compile)."""
    text = os.environ.get(JSON_OPTIONS_ENV, "").strip()
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError as e:
        raise ValueError(f"{JSON_OPTIONS_ENV} is not JSON: {e}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{JSON_OPTIONS_ENV} must be a JSON object of JSON Schema options")
    unknown = sorted(k for k in value if k not in SCHEMA_OPTIONS)
    if unknown:
        raise ValueError(
            f"{JSON_OPTIONS_ENV}: unknown option(s) {', '.join(map(repr, unknown))}; options "
            f"are: {', '.join(SCHEMA_OPTIONS)}"
        )
    return value


def create_backend(
    server_args: Any, tokenizer: Any, vocab_size: int, eos_token_ids: Any = None
) -> Any:
    """SGLang's registry calls this as ``init(server_args, tokenizer, vocab_size,
    eos_token_ids)``; a registered backend is returned as is by ``create_grammar_backend``, so
    the reasoning wrapper SGLang puts around its own backends is added here."""
    backend = TokensieveGrammarBackend(
        tokenizer,
        vocab_size,
        eos_token_ids,
        json_options={**json_options_from_server(), **json_options_from_env()},
    )
    parser_name = _serving("reasoning_parser", None)
    if not parser_name or tokenizer is None:
        return backend
    from sglang.srt.constrained.reasoner_grammar_backend import ReasonerGrammarBackend
    from sglang.srt.parser.reasoning_parser import ReasoningParser

    parser = ReasoningParser(model_type=parser_name, stream_reasoning=False, tokenizer=tokenizer)
    if not parser.detector.get_think_end_token_ids(tokenizer):
        logger.warning(
            "tokensieve: the reasoning parser's think-end token %r is not in the tokenizer; "
            "constraints apply from the first output token",
            parser.detector.think_end_token,
        )
        return backend
    return ReasonerGrammarBackend(
        backend,
        parser,
        tokenizer,
        enable_strict_thinking=bool(_serving("enable_strict_thinking", False)),
    )


def register_backend(name: str) -> None:
    """Add ``name`` to SGLang's grammar backend registry and ``--grammar-backend`` choices."""
    register_grammar_backend(name, create_backend)
    choices: Any = None
    add: Any = None
    for module in ("sglang.srt.arg_groups.choices", "sglang.srt.server_args"):
        try:
            mod = __import__(module, fromlist=["GRAMMAR_BACKEND_CHOICES"])
        except ImportError:
            continue
        choices = getattr(mod, "GRAMMAR_BACKEND_CHOICES", None)
        add = getattr(mod, "add_grammar_backend_choices", None)
        if choices is not None:
            break
    if choices is not None and name in choices:
        return
    if add is not None:
        add([name])
    elif isinstance(choices, list):
        choices.append(name)
