"""Constrained generation with Hugging Face ``transformers``: logits processors for ``generate()``.

::

    from tokensieve.transformers import EBNFLogitsProcessor, RegexLogitsProcessor

    proc = RegexLogitsProcessor(r"[0-9]{3}-[0-9]{4}", tokenizer)
    proc = EBNFLogitsProcessor('root ::= "(" root ")" | "x"', tokenizer)   # GBNF/EBNF
    proc = StructuralTagLogitsProcessor(tag, tokenizer)   # a structural tag (tool calls)
    out = model.generate(**inputs, logits_processor=[proc], max_new_tokens=16,
                         pad_token_id=tokenizer.eos_token_id)

Every row of the batch gets its own matcher, created on the first call; the processor finds the
newly generated tokens by the growth of ``input_ids`` (the prompt length is fixed on the first
call, so left padding is irrelevant). With ``num_return_sequences`` (or ``num_beams``) the rows
are ``batch × n`` and row ``r`` uses the grammar of prompt ``r // n``. Beam search reorders rows
between steps: a row whose generated tokens no longer extend the ones it had is rebuilt by
replaying its tokens into a fresh matcher (so beam search works, at a cost linear in the output
length for each reordered row; the same covers sequences that shrink). A new ``generate()``
call is detected (another batch size or prompt, or a sequence shorter than the last) and starts
over; :meth:`TransformersLogitsProcessor.reset` forces that (needed only when a new call's prompt
extends the previous call's prompt and output exactly).

The logits may be wider than the vocabulary (models pad their embedding matrix): ids at or past
``vocab.vocab_size`` are always masked. A finished row (EOS consumed) allows only EOS; a row
whose output left the grammar (an earlier processor or a forced token) allows only EOS, with a
warning; so does a row whose matcher fails in any way (a budget hit, or any other exception,
logged with its traceback): one row's failure never fails the others or the ``generate()``
call. Pass ``pad_token_id`` = an EOS id so finished rows stay consistent.

The scores are masked in place (``-inf``) and returned.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import tokensieve as ts
from tokensieve.constraints import compile_constraint
from tokensieve.guides import MaskBuffer, RequestGuide, error_text

if TYPE_CHECKING:  # typed the same with or without transformers installed
    _HFLogitsProcessor = object
else:
    try:  # subclass the real base when transformers is installed (isinstance checks, docs)
        from transformers import LogitsProcessor as _HFLogitsProcessor
    except ImportError:  # the processor works with any caller of __call__
        _HFLogitsProcessor = object

__all__ = [
    "ChoiceLogitsProcessor",
    "EBNFLogitsProcessor",
    "LarkLogitsProcessor",
    "TransformersLogitsProcessor",
    "JSONLogitsProcessor",
    "RegexLogitsProcessor",
    "StructuralTagLogitsProcessor",
    "vocabulary_for",
]

_VOCABS: OrderedDict[tuple[Any, ...], tuple[Any, ts._core.Vocabulary]] = OrderedDict()
_VOCABS_LOCK = threading.Lock()
_VOCABS_MAX = 8


def vocabulary_for(
    tokenizer: Any, vocab_size: int | None = None, eos_token_ids: Sequence[int] | None = None
) -> ts._core.Vocabulary:
    """The :class:`~tokensieve.Vocabulary` of a tokenizer, built once and reused.

    ``tokenizer`` is anything :meth:`Vocabulary.from_pretrained` accepts, or a ``Vocabulary``
    (returned as is). ``vocab_size`` is the model's logits width (``model.config.vocab_size``);
    the default, the tokenizer's size, is fine too: wider logits are masked past it anyway.
    """
    if isinstance(tokenizer, ts._core.Vocabulary):
        return tokenizer
    source: Any = str(tokenizer) if isinstance(tokenizer, (str, bytes)) else id(tokenizer)
    key = (source, vocab_size, tuple(eos_token_ids) if eos_token_ids is not None else None)
    with _VOCABS_LOCK:
        hit = _VOCABS.get(key)
        if hit is not None and (isinstance(source, str) or hit[0] is tokenizer):
            _VOCABS.move_to_end(key)
            return hit[1]
    vocab = ts.Vocabulary.from_pretrained(
        tokenizer, vocab_size=vocab_size, eos_token_ids=eos_token_ids
    )
    with _VOCABS_LOCK:
        _VOCABS[key] = (tokenizer, vocab)  # the tokenizer is kept so its id stays unique
        while len(_VOCABS) > _VOCABS_MAX:
            _VOCABS.popitem(last=False)
    return vocab


class _Generation:
    """What one ``generate()`` call looks like to the processor."""

    __slots__ = ("rows", "prompt_len", "length", "prompt", "generated", "guides")

    def __init__(self, ids: Any, guides: list[RequestGuide]) -> None:
        self.rows = int(ids.shape[0])
        self.prompt_len = int(ids.shape[1])
        self.length = self.prompt_len
        self.prompt = ids
        self.generated = ids[:, self.prompt_len :]
        self.guides = guides


class TransformersLogitsProcessor(_HFLogitsProcessor):
    """Mask ``generate()``'s scores to one compiled grammar per row.

    Args:
        grammars: one :class:`~tokensieve.Grammar` for every row, or a sequence with one per
            prompt (rows ``batch × n`` with ``num_return_sequences``/``num_beams`` = n; prompt
            ``r // n`` for row ``r``) or one per row. All must share one vocabulary.
    """

    def __init__(self, grammars: ts.Grammar | Sequence[ts.Grammar]) -> None:
        if isinstance(grammars, ts.Grammar):
            self._grammars: list[ts.Grammar] = [grammars]
            self._shared = True
        else:
            self._grammars = list(grammars)
            self._shared = False
            if not self._grammars:
                raise ValueError("grammars is empty")
            for g in self._grammars:
                if not isinstance(g, ts.Grammar):
                    raise TypeError(f"expected tokensieve.Grammar, got {type(g).__name__}")
        self.vocab = self._grammars[0].vocab
        fp = self.vocab.fingerprint
        if any(g.vocab.fingerprint != fp for g in self._grammars):
            raise ValueError("all grammars must be compiled for the same vocabulary")
        self._masks: MaskBuffer | None = None
        self._gen: _Generation | None = None

    def reset(self) -> None:
        """Forget the current generation; the next call starts a new one."""
        self._gen = None

    @property
    def guides(self) -> list[RequestGuide]:
        """The per-row guides of the current generation (empty before the first call)."""
        return list(self._gen.guides) if self._gen is not None else []

    def _grammar_for_row(self, row: int, rows: int) -> ts.Grammar:
        if self._shared:
            return self._grammars[0]
        n = len(self._grammars)
        if n == rows:
            return self._grammars[row]
        if rows % n:
            raise ValueError(
                f"{n} grammars for {rows} rows: pass one grammar, one per prompt (rows must be a "
                "multiple: batch × num_return_sequences) or one per row"
            )
        return self._grammars[row // (rows // n)]

    def _start(self, ids: Any) -> _Generation:
        rows = int(ids.shape[0])
        guides = [
            RequestGuide(self._grammar_for_row(r, rows), label=f"row {r}") for r in range(rows)
        ]
        return _Generation(ids, guides)

    def _advance(self, ids: Any) -> _Generation:
        import torch

        gen = self._gen
        rows, length = int(ids.shape[0]), int(ids.shape[1])
        if (
            gen is None
            or rows != gen.rows
            or length < gen.prompt_len
            or not torch.equal(ids[:, : gen.prompt_len], gen.prompt)
        ):
            return self._start(ids)
        generated = ids[:, gen.prompt_len :]
        old = gen.generated.shape[1]
        if generated.shape[1] >= old:
            same = (generated[:, :old] == gen.generated).all(dim=1).tolist()
        else:  # shorter than last time (a new call with the same prompt, rejected drafts)
            same = [False] * rows
        for r, guide in enumerate(gen.guides):
            try:
                if same[r]:
                    for token in generated[r, old:].tolist():
                        guide.feed(token)
                else:  # beam search moved another hypothesis here: replay this row's tokens
                    guide.reset()
                    guide.sync(generated[r].tolist())
            except Exception as e:  # the guide fails itself; this is the last resort
                guide.fail(error_text(e, limit=None), e)
        gen.generated = generated
        gen.length = length
        return gen

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        ids = input_ids.detach().to("cpu", torch.long)
        if ids.dim() != 2 or scores.dim() != 2 or ids.shape[0] != scores.shape[0]:
            raise ValueError(
                f"expected input_ids [rows, length] and scores [rows, vocab]; got "
                f"{tuple(ids.shape)} and {tuple(scores.shape)}"
            )
        self._gen = self._advance(ids)
        rows = self._gen.rows
        if self._masks is None:
            self._masks = MaskBuffer(self.vocab, rows)
        return self._masks.mask_logits(scores, self._gen.guides, list(range(rows)))


def _compile_all(
    kind: str, values: Any, many: bool, vocab: ts._core.Vocabulary, options: Mapping[str, Any]
) -> ts.Grammar | list[ts.Grammar]:
    if many:
        return [compile_constraint(kind, v, vocab, **options) for v in values]
    return compile_constraint(kind, values, vocab, **options)


class RegexLogitsProcessor(TransformersLogitsProcessor):
    """Constrain every row (or each prompt's rows) to full matches of a regex.

    Args:
        pattern: a regex, or a list with one per prompt (or per row).
        tokenizer: a ``transformers`` tokenizer, a ``tokenizer.json`` path or folder, or a
            :class:`~tokensieve.Vocabulary`.
        vocab_size: the model's logits width (default: the tokenizer's size).
        eos_token_ids: override the EOS ids read from the tokenizer.
        **options: :meth:`Grammar.from_regex` options (``max_states`` …).
    """

    def __init__(
        self,
        pattern: str | Sequence[str],
        tokenizer: Any,
        *,
        vocab_size: int | None = None,
        eos_token_ids: Sequence[int] | None = None,
        **options: Any,
    ) -> None:
        vocab = vocabulary_for(tokenizer, vocab_size, eos_token_ids)
        many = not isinstance(pattern, str)
        super().__init__(_compile_all("regex", pattern, many, vocab, options))


class JSONLogitsProcessor(TransformersLogitsProcessor):
    """Constrain rows to JSON documents valid under a JSON Schema.

    ``schema`` is a ``dict``, a JSON text, a pydantic model class, or a list of those (one per
    prompt or per row). ``**options`` are :meth:`Grammar.from_json_schema` options
    (``whitespace`` …). Raises ``ValueError`` while this build has no ``from_json_schema``.
    """

    def __init__(
        self,
        schema: Any,
        tokenizer: Any,
        *,
        vocab_size: int | None = None,
        eos_token_ids: Sequence[int] | None = None,
        **options: Any,
    ) -> None:
        vocab = vocabulary_for(tokenizer, vocab_size, eos_token_ids)
        many = isinstance(schema, (list, tuple))
        super().__init__(_compile_all("json_schema", schema, many, vocab, options))


class ChoiceLogitsProcessor(TransformersLogitsProcessor):
    """Constrain every row's output to exactly one of ``choices`` (a list of strings)."""

    def __init__(
        self,
        choices: Sequence[str],
        tokenizer: Any,
        *,
        vocab_size: int | None = None,
        eos_token_ids: Sequence[int] | None = None,
        **options: Any,
    ) -> None:
        vocab = vocabulary_for(tokenizer, vocab_size, eos_token_ids)
        super().__init__(_compile_all("choice", list(choices), False, vocab, options))


class EBNFLogitsProcessor(TransformersLogitsProcessor):
    """Constrain rows to the language of a GBNF/EBNF grammar (:meth:`Grammar.from_ebnf`).

    Args:
        grammar: the grammar's text (llama.cpp's GBNF or xgrammar's EBNF; a grammar with no
            ``name ::= ...`` rule is read as Lark, see :class:`LarkLogitsProcessor`), or a list
            with one per prompt (or per row).
        tokenizer: as for :class:`RegexLogitsProcessor`.
        start: the rule the grammar starts from (default ``root``).
        **options: :meth:`Grammar.from_ebnf` options (``max_stack_depth``, ``max_states`` …).
    """

    _kind = "ebnf"  # the constraint kind the text compiles as (a subclass's may differ)

    def __init__(
        self,
        grammar: str | Sequence[str],
        tokenizer: Any,
        *,
        start: str | None = None,
        vocab_size: int | None = None,
        eos_token_ids: Sequence[int] | None = None,
        **options: Any,
    ) -> None:
        vocab = vocabulary_for(tokenizer, vocab_size, eos_token_ids)
        many = not isinstance(grammar, str)
        options = {**options, "start": start}
        super().__init__(_compile_all(self._kind, grammar, many, vocab, options))


class LarkLogitsProcessor(EBNFLogitsProcessor):
    """Constrain rows to the language of a Lark grammar (:meth:`Grammar.from_lark`: the dialect
    llguidance documents, its terminals lexed greedily, ``%ignore`` between lexemes).

    Args:
        grammar: the grammar's text, or a list with one per prompt (or per row).
        tokenizer: as for :class:`RegexLogitsProcessor`.
        start: the rule the grammar starts from (default ``start``).
        **options: :meth:`Grammar.from_lark` options (``max_stack_depth``, ``max_states`` …).
    """

    _kind = "lark"


class StructuralTagLogitsProcessor(TransformersLogitsProcessor):
    """Constrain rows to a structural tag (:meth:`Grammar.from_structural_tag`): free text and
    tagged, constrained parts such as tool calls, as vLLM's and SGLang's tool calling send them.

    Args:
        tag: the structural tag, as a dict or its JSON text, or a list with one per prompt (or
            per row).
        tokenizer: as for :class:`RegexLogitsProcessor`; its special tokens are what the tag's
            ``token`` nodes and special-token markers name.
        **options: :meth:`Grammar.from_structural_tag` options (JSON Schema options for its
            ``json_schema`` parts, ``max_states`` …).
    """

    def __init__(
        self,
        tag: str | Mapping[str, Any] | Sequence[str | Mapping[str, Any]],
        tokenizer: Any,
        *,
        vocab_size: int | None = None,
        eos_token_ids: Sequence[int] | None = None,
        **options: Any,
    ) -> None:
        vocab = vocabulary_for(tokenizer, vocab_size, eos_token_ids)
        many = not isinstance(tag, (str, Mapping))
        super().__init__(_compile_all("structural_tag", tag, many, vocab, options))
