"""The logits processor for vLLM's V1 model runner (the interface in vLLM's docs).

Used with ``VLLM_USE_V2_MODEL_RUNNER=0`` and where the V2 runner is unavailable (CPU-only
hosts)::

    from vllm import LLM, SamplingParams
    from tokensieve.vllm import GuidedLogitsProcessorV1

    llm = LLM(model=..., logits_processors=[GuidedLogitsProcessorV1])
    params = SamplingParams(extra_args={"guided_regex": "[0-9]{3}"})

(``vllm serve ... --logits-processors tokensieve.vllm:GuidedLogitsProcessorV1`` and
``"vllm_xargs": {"guided_json": "..."}`` in the request body on the OpenAI server.)

State per persistent-batch row: a :class:`~tokensieve.guides.RequestGuide` holding the
request's matcher and a reference to its live output-token list. ``update_state`` applies a
``BatchUpdate`` in the documented order: removes, then adds (an add replaces whatever occupied
the index, discarding its state), then moves (``UNIDIRECTIONAL`` overwrites the destination and
empties the source; ``SWAP`` exchanges). ``apply`` feeds each constrained row the tokens appended
to its list since the last step, fills their bitmask rows in one parallel call, and masks only
those rows; with no constrained row in the batch it returns the logits untouched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tokensieve.guides import MaskBuffer, RequestGuide
from tokensieve.vllm.processor_base import GuidedProcessorBase, error_text

if TYPE_CHECKING:  # typed the same with or without vLLM installed
    _V1Base = object
else:
    try:
        from vllm.v1.sample.logits_processor import LogitsProcessor as _V1Base
    except ImportError:  # vLLM absent: the class still works when driven directly
        _V1Base = object

__all__ = ["GuidedLogitsProcessorV1"]

_DEFAULT_MAX_ROWS = 256


def _is_swap(direction: Any) -> bool:
    return getattr(direction, "name", str(direction)).upper().endswith("SWAP")


class GuidedLogitsProcessorV1(GuidedProcessorBase, _V1Base):
    """Regex / JSON Schema / choice constraints per request, for vLLM's V1 model runner.

    A request opts in through ``SamplingParams.extra_args`` (see
    :mod:`tokensieve.vllm.constraints`).
    """

    def __init__(self, vllm_config: Any, device: Any, is_pin_memory: bool) -> None:
        import torch

        self.vocab = self._resolve_vocabulary(vllm_config)
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.is_pin_memory = bool(is_pin_memory)
        sched = getattr(vllm_config, "scheduler_config", None)
        max_rows = int(getattr(sched, "max_num_seqs", 0) or _DEFAULT_MAX_ROWS)
        self._guides: dict[int, RequestGuide] = {}
        pin = self.is_pin_memory and self.device.type != "cpu"
        self._masks = MaskBuffer(self.vocab, max_rows, pin=pin)

    def is_argmax_invariant(self) -> bool:
        """False: masking changes which token is the argmax."""
        return False

    @property
    def constrained_rows(self) -> list[int]:
        """Batch indices that currently hold a constrained request."""
        return sorted(self._guides)

    def guide(self, index: int) -> RequestGuide | None:
        """The guide of the request at a batch index (None: unconstrained or empty)."""
        return self._guides.get(index)

    def update_state(self, batch_update: Any) -> None:
        if batch_update is None:
            return
        guides = self._guides
        for index in batch_update.removed:
            guides.pop(index, None)
        for added in batch_update.added:
            # (index, params, prompt_tok_ids, output_tok_ids); older vLLMs: 3-tuples
            index, params, output = added[0], added[1], added[-1]
            guide = (
                self._new_guide(params, output, f"batch row {index}")
                if params is not None
                else None
            )
            if guide is None:
                guides.pop(index, None)
            else:
                guides[index] = guide
        for src, dst, direction in batch_update.moved:
            a, b = guides.pop(src, None), guides.pop(dst, None)
            if a is not None:
                guides[dst] = a
            if b is not None and _is_swap(direction):
                guides[src] = b

    def apply(self, logits: Any) -> Any:
        if not self._guides:
            return logits
        rows = int(logits.shape[0])
        indices = [i for i in sorted(self._guides) if i < rows]
        if not indices:
            return logits
        guides = [self._guides[i] for i in indices]
        for g in guides:
            try:
                g.sync()
            except Exception as e:  # never let one request take the batch down
                g.fail(error_text(e))
        return self._masks.mask_logits(logits, guides, indices)
