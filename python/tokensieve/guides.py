"""Per-request decoding state shared by the vLLM and Hugging Face adapters.

A :class:`RequestGuide` owns one request's matcher and the number of output tokens it has
consumed, so an adapter only has to tell it what the request's output is now (a live list, or a
count plus the newest token). A request whose constraint failed to compile, whose matcher hit a
budget, or whose output left the grammar (a token the mask did not allow) is *failed*: from then
on its row allows only EOS, the failure is logged once, and no exception leaves the adapter, so
one bad request never takes a batch (or an engine) down. That holds for any ``Exception`` one
request's compile, matcher or mask raises (a ``RecursionError`` or ``MemoryError`` included,
logged with its traceback): every method of :class:`RequestGuide` and :func:`fill_guides` fail
that request alone, and the other rows keep their masks.

:class:`MaskBuffer` is the one step every adapter runs on its logits: grow the host bitmask,
fill the guides' rows, copy it to the logits' device, apply it.
:func:`fill_guides` fills the bitmask rows of many guides in one parallel call;
:func:`apply_bitmask` masks logits with :func:`tokensieve.apply_token_bitmask_inplace` (or a plain
torch fallback when this build lacks it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import tokensieve as ts
from tokensieve.constraints import error_text

__all__ = [
    "MaskBuffer",
    "Pending",
    "RequestGuide",
    "apply_bitmask",
    "eos_only_row",
    "error_text",
    "fill_guides",
]

logger = logging.getLogger("tokensieve.guides")


class Pending(Protocol):
    """A grammar being compiled: :class:`tokensieve.constraints.PendingCompile`, or any
    object with a ``Future``'s ``done()`` and ``result()``."""

    def done(self) -> bool: ...

    def result(self) -> ts.Grammar: ...


# History kept by each matcher: enough to roll back speculative (draft) tokens or a few
# discarded outputs; anything longer is replayed from the start instead.
MAX_ROLLBACK = 64


class RequestGuide:
    """One request's matcher, how many of its output tokens it consumed, and its failure.

    ``tokens`` optionally holds the request's live output-token list (vLLM V1 passes a list
    that the engine appends to); :meth:`sync` then feeds what was appended since the last call.
    """

    __slots__ = (
        "grammar",
        "matcher",
        "consumed",
        "error",
        "compile_error",
        "label",
        "tokens",
        "pending",
        "max_tokens",
        "reasoning_end",
        "thinking_budget",
    )

    def __init__(
        self,
        grammar: ts.Grammar | None,
        *,
        error: str | None = None,
        label: str = "",
        tokens: Sequence[int] | None = None,
        pending: Pending | None = None,
        max_tokens: int | None = None,
        reasoning_end: str | None = None,
        thinking_budget: int | None = None,
    ) -> None:
        if grammar is None and error is None and pending is None:
            raise ValueError("a RequestGuide needs a grammar, a pending compile or an error")
        # Free reasoning text up to this marker before the grammar (Grammar.matcher).
        self.reasoning_end = reasoning_end
        self.thinking_budget = thinking_budget
        # A compile running in the background: the guide waits for it on first use
        # (:meth:`ready`), so the compile overlaps whatever the engine does until then.
        self.pending = pending
        # With a budget, masks keep the output finishable within it (Matcher.max_tokens).
        self.max_tokens = max_tokens
        self.grammar = grammar
        self.matcher: ts._core.Matcher | None = None
        self.consumed = 0
        self.compile_error = error
        self.error: str | None = None
        self.label = label
        self.tokens = tokens
        if error is not None:
            self.fail(error)
        if grammar is not None:
            self._start(grammar)
        if pending is not None and pending.done():
            self.ready()  # a cache hit, or a compile already over: no waiting later

    @property
    def failed(self) -> bool:
        self.ready()
        return self.error is not None

    @property
    def is_ready(self) -> bool:
        """False while a background compile is still running."""
        return self.pending is None or self.pending.done()

    def ready(self) -> None:
        """Wait for the background compile, if any: afterwards the guide has its matcher, or
        is failed with the compile's message."""
        pending = self.pending
        if pending is None:
            return
        self.pending = None
        try:
            grammar = pending.result()
        except Exception as e:  # the cache's client-readable ValueError, or anything else
            self._fail_compile(e, _message(e, (ValueError,)))
            return
        self._start(grammar)

    def _start(self, grammar: ts.Grammar) -> None:
        """The matcher at the start of the output; a setting it refuses (a reasoning marker
        the vocabulary cannot spell), or anything else that fails here, fails the guide like a
        compile error."""
        self.grammar = grammar
        try:
            self.matcher = grammar.matcher(
                max_rollback=MAX_ROLLBACK,
                max_tokens=self.max_tokens,
                reasoning_end=self.reasoning_end,
                thinking_budget=self.thinking_budget,
            )
        except Exception as e:
            self.matcher = None
            self._fail_compile(e, _message(e, (ValueError, ts.TokensieveError)))

    def _fail_compile(self, error: Exception, message: str) -> None:
        """Failed for good (a reset keeps it): the grammar or its matcher could not be made."""
        self.compile_error = message
        self.fail(message, error)

    def fail(self, message: str, error: BaseException | None = None) -> None:
        """Allow only EOS from now on; logged once per request (with the traceback of
        ``error`` when it is not an input error: a ``ValueError`` or a ``TokensieveError``)."""
        if self.error is None:
            self.error = message
            unexpected = error is not None and not isinstance(
                error, (ValueError, ts.TokensieveError)
            )
            logger.warning(
                "request %s is forced to end (EOS only): %s",
                self.label or "?",
                message,
                exc_info=error if unexpected else None,
            )

    def _fail_unexpected(self, error: Exception) -> None:
        """Failed by an exception raised while following the output (logged with it)."""
        self.fail(error_text(error, limit=None), error)

    def reset(self) -> None:
        """Back to the start of the output (a compile failure stays)."""
        self.ready()
        self.consumed = 0
        self.error = self.compile_error
        if self.matcher is not None:
            try:
                self.matcher.reset()
            except Exception as e:
                self._fail_unexpected(e)

    def feed(self, token: int) -> None:
        """Advance by one output token (counted even when ignored)."""
        self.ready()
        self.consumed += 1
        m = self.matcher
        if m is None or self.error is not None:
            return  # failed: EOS only
        try:
            if m.is_finished():
                return  # finished: tokens after EOS are not ours to judge
            token = int(token)
            ok = m.accept_token(token)
        except Exception as e:  # a budget hit while advancing the automaton, or anything else
            self._fail_unexpected(e)
            return
        if not ok:
            self.fail(f"output token {token} at position {self.consumed - 1} is not allowed")

    def sync(self, tokens: Sequence[int] | None = None) -> None:
        """Catch up with the output list (default: the live ``tokens`` list).

        Negative ids are placeholders for tokens not yet known (async scheduling): consumption
        stops there. A list shorter than what was consumed (tokens discarded) is replayed.
        """
        self.ready()
        seq = self.tokens if tokens is None else tokens
        if seq is None:
            return
        n = len(seq)
        if n < self.consumed:
            self._rewind(n, seq)
        while self.consumed < n:
            tok = int(seq[self.consumed])
            if tok < 0:
                break
            self.feed(tok)

    def sync_count(
        self, n: int, last_token: int, fetch: Callable[[int, int], Sequence[int]]
    ) -> None:
        """Catch up to ``n`` output tokens, the last of which is ``last_token``.

        ``fetch(start, end)`` returns output tokens ``start .. end`` (exclusive) when more than
        one is missing (several accepted draft tokens, or a resumed request).
        """
        self.ready()
        if n <= 0:
            if self.consumed:
                self.reset()
            return
        if n < self.consumed:
            self._rewind(n, None, fetch)
        if n == self.consumed:
            return
        if n > self.consumed + 1:
            for tok in fetch(self.consumed, n - 1):
                self.feed(int(tok))
        self.feed(int(last_token))

    def _rewind(
        self,
        n: int,
        seq: Sequence[int] | None,
        fetch: Callable[[int, int], Sequence[int]] | None = None,
    ) -> None:
        back = self.consumed - n
        m = self.matcher
        # Every consumed token was accepted (no failure, not finished), so the history has them.
        try:
            if (
                m is not None
                and self.error is None
                and not m.is_finished()
                and back <= m.history_len
            ):
                m.rollback(back)
                self.consumed = n
                return
        except Exception:
            pass  # replayed from the start below
        self.reset()
        if seq is not None:
            return  # sync() replays from the list
        if fetch is not None and n > 0:
            for tok in fetch(0, n):
                self.feed(int(tok))


def _message(error: BaseException, plain: tuple[type[BaseException], ...]) -> str:
    """How a failure is reported: the message alone for the ``plain`` types (a client-readable
    ``ValueError``), ``Type: message`` for anything else."""
    if isinstance(error, plain):
        try:
            text = str(error)
        except Exception:
            text = ""
        if text:
            return text
    return error_text(error, limit=None)


def eos_only_row(vocab: ts._core.Vocabulary) -> Any:
    """A bitmask row (int32 torch tensor) allowing exactly the vocabulary's EOS ids."""
    import torch

    words = ts.bitmask_words(vocab.vocab_size)
    values = [0] * words
    for t in vocab.eos_token_ids:
        if 0 <= t < vocab.vocab_size:
            values[t // 32] |= 1 << (t % 32)
    signed = [v - (1 << 32) if v >= (1 << 31) else v for v in values]
    return torch.tensor(signed, dtype=torch.int32)


def fill_guides(
    guides: Sequence[RequestGuide], rows: Sequence[int], bitmask: Any, eos_row: Any
) -> None:
    """Fill ``bitmask[rows[k]]`` for ``guides[k]``: one parallel call for the healthy ones.

    A guide whose fill raises is failed (and gets the EOS-only row) without affecting others.
    A guide still compiling is waited for first; one whose compile or matcher fails is failed
    alone, whatever it raised.
    """
    for g in guides:
        try:
            g.ready()
        except Exception as e:  # ready() fails the guide itself; this is the last resort
            g.pending = None
            g._fail_unexpected(e)
    live = [(g, r) for g, r in zip(guides, rows) if g.error is None and g.matcher is not None]
    if live:
        try:
            ts.fill_next_token_bitmask(
                [g.matcher for g, _ in live if g.matcher is not None],
                bitmask,
                [r for _, r in live],
            )
        except Exception:
            for g, r in live:  # find the culprit(s) one row at a time
                try:
                    assert g.matcher is not None
                    g.matcher.fill_next_token_bitmask(bitmask, r)
                except Exception as e:
                    g._fail_unexpected(e)
    for g, r in zip(guides, rows):
        if g.error is not None:
            bitmask[r] = eos_row


def apply_bitmask(logits: Any, bitmask: Any, indices: Sequence[int], vocab_size: int) -> None:
    """Set disallowed logits to ``-inf`` in rows ``indices`` (bitmask row ``i`` for logits row
    ``i``); columns at or past ``vocab_size`` are disallowed."""
    vocab_size = min(vocab_size, int(logits.shape[-1]))
    apply = getattr(ts, "apply_token_bitmask_inplace", None)
    if apply is not None:
        apply(logits, bitmask, indices=list(indices), vocab_size=vocab_size)
        return
    _apply_bitmask_torch(logits, bitmask, indices, vocab_size)


def _apply_bitmask_torch(
    logits: Any, bitmask: Any, indices: Sequence[int], vocab_size: int
) -> None:
    import torch

    if not indices:
        return
    rows = torch.tensor(list(indices), dtype=torch.long, device=logits.device)
    words = bitmask.index_select(0, rows.to(bitmask.device)).to(logits.device)
    shifts = torch.arange(32, dtype=torch.int32, device=logits.device)
    allowed = ((words.unsqueeze(-1) >> shifts) & 1).bool().reshape(len(indices), -1)
    width = int(logits.shape[-1])
    keep = torch.zeros((len(indices), width), dtype=torch.bool, device=logits.device)
    limit = min(vocab_size, allowed.shape[1], width)
    keep[:, :limit] = allowed[:, :limit]
    logits[rows] = logits[rows].masked_fill(~keep, float("-inf"))


class MaskBuffer:
    """The host bitmask an adapter fills at every step, grown on demand (doubling), pinned when
    the logits live on an accelerator and ``pin`` is set."""

    def __init__(self, vocab: ts._core.Vocabulary, rows: int, *, pin: bool = False) -> None:
        self.vocab = vocab
        self.pin = pin
        self.eos_row = eos_only_row(vocab)
        self.mask = self._allocate(rows)

    def _allocate(self, rows: int) -> Any:
        mask = ts.allocate_token_bitmask(max(rows, 1), self.vocab.vocab_size)
        return mask.pin_memory() if self.pin else mask

    def mask_logits(
        self,
        logits: Any,
        guides: Sequence[RequestGuide],
        rows: Sequence[int],
        more: Callable[[Any], Sequence[int]] | None = None,
    ) -> Any:
        """Set ``logits[rows[k]]`` to what ``guides[k]`` allows (``-inf`` elsewhere).

        ``more(bitmask)``, when given, fills further rows itself (e.g. draft tokens) and returns
        them; they are masked too. Rows not named keep their logits.
        """
        n = int(logits.shape[0])
        if self.mask.shape[0] < n:
            self.mask = self._allocate(max(n, 2 * self.mask.shape[0]))
        bitmask = self.mask[:n]
        fill_guides(guides, rows, bitmask, self.eos_row)
        indices = list(rows)
        if more is not None:
            indices.extend(more(bitmask))
        if logits.device.type != "cpu":
            # One host buffer is enough: before the next fill the host has waited for this
            # step's sampled tokens, which the device produces after this copy.
            bitmask = bitmask.to(logits.device, non_blocking=True)
        apply_bitmask(logits, bitmask, indices, self.vocab.vocab_size)
        return logits
