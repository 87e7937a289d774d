"""The logits processor for vLLM's V2 model runner (the default where Triton is available), which
also serves the V1 runner by handing it a :class:`~tokensieve.vllm.v1.GuidedLogitsProcessorV1`.

::

    llm = LLM(model=..., logits_processors=[GuidedLogitsProcessor])
    params = SamplingParams(extra_args={"guided_json": {...}})

The V2 interface (``vllm/v1/worker/gpu/sample/logits_processor/interface.py``) keys requests by
persistent *slot*: ``add_request(slot, params)`` (re)initializes a slot, and every ``apply(logits,
ctx)`` gets the step's layout: ``ctx.expanded_idx_mapping`` (logits row → slot),
``ctx.expanded_local_pos`` (draft offset within the request), ``ctx.input_ids`` (the token fed at
each row: the request's newest committed token at offset 0, a draft token after that) and
``ctx.pos``. The sampled tokens live on the device, so each step does one small device-to-host
copy of those four vectors (only when a constrained request is in the batch); a row at offset 0
has ``pos + 1 - prompt_len`` committed output tokens, the newest of them ``input_ids[row]``.
Output tokens the guide has not seen besides that one (several accepted draft tokens, a request
resumed after preemption) are read from ``req_states.all_token_ids`` with one more copy.

Speculative decoding: a request's draft rows are masked in order, each after the previous draft
tokens, then the matcher is rolled back; rows after a draft token the grammar rejects allow only
EOS (the rejection sampler discards them anyway).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import numpy as np

from tokensieve.guides import MaskBuffer, RequestGuide
from tokensieve.vllm.processor_base import GuidedProcessorBase, error_text
from tokensieve.vllm.v1 import GuidedLogitsProcessorV1

if TYPE_CHECKING:  # typed the same with or without vLLM installed
    _Bases = object
else:
    try:
        from vllm.v1.worker.gpu.sample.logits_processor import LogitsProcessor as _V2Base
    except ImportError:  # vLLM absent: the class still works when driven directly
        _V2Base = None
    try:
        from vllm.v1.sample.logits_processor import LogitsProcessor as _V1Base
    except ImportError:
        _V1Base = None
    # Both runners' base classes, so that either runner's loader accepts the class.
    _found = tuple(b for b in (_V2Base, _V1Base) if b is not None)
    _Bases = type("_RunnerBases", _found, {}) if len(_found) > 1 else (_found or (object,))[0]

__all__ = ["GuidedLogitsProcessor"]

_V1_TWINS: dict[type, type] = {}


class GuidedLogitsProcessor(GuidedProcessorBase, _Bases):
    """Regex / JSON Schema / choice constraints per request, for either vLLM model runner.

    A request opts in through ``SamplingParams.extra_args`` (see
    :mod:`tokensieve.vllm.constraints`). The class is a subclass of both runners'
    ``LogitsProcessor``: the V2 runner builds it as ``cls(vllm_config, req_states)`` and gets
    this class; the V1 runner (``VLLM_USE_V2_MODEL_RUNNER=0``, CPU hosts) builds it as
    ``cls(vllm_config, device, is_pin_memory)`` and gets a
    :class:`~tokensieve.vllm.v1.GuidedLogitsProcessorV1` with the same vocabulary, cache and
    settings (:meth:`for_v1_runner`).
    """

    def __new__(cls, vllm_config: Any = None, *args: Any, **kwargs: Any) -> Any:
        if len(args) + len(kwargs) >= 2:  # the V1 runner: (vllm_config, device, is_pin_memory)
            return cls.for_v1_runner()(vllm_config, *args, **kwargs)
        return super().__new__(cls)

    @classmethod
    def for_v1_runner(cls) -> type[GuidedLogitsProcessorV1]:
        """The V1-runner processor carrying this class's vocabulary, cache and settings."""
        twin = _V1_TWINS.get(cls)
        if twin is None:
            attrs: dict[str, Any] = {name: getattr(cls, name) for name in cls.SETTINGS}
            attrs["__module__"] = cls.__module__
            twin = _V1_TWINS.setdefault(cls, type(cls.__name__, (GuidedLogitsProcessorV1,), attrs))
        return twin

    def update_state(self, batch_update: Any) -> None:
        """Part of the V1 interface only; instances of this class serve the V2 runner (the V1
        runner gets a :class:`~tokensieve.vllm.v1.GuidedLogitsProcessorV1`)."""
        raise TypeError(
            "this GuidedLogitsProcessor was built for vLLM's V2 model runner; the V1 runner "
            "builds GuidedLogitsProcessor(vllm_config, device, is_pin_memory), which returns a "
            "GuidedLogitsProcessorV1"
        )

    def __init__(self, vllm_config: Any, req_states: Any) -> None:
        import torch

        self.vocab = self._resolve_vocabulary(vllm_config)
        self.req_states = req_states
        self.device = torch.device(getattr(req_states, "device", "cpu"))
        max_reqs = int(req_states.max_num_reqs)
        self._guides: list[RequestGuide | None] = [None] * max_reqs
        self._constrained = np.zeros(max_reqs, dtype=bool)
        self._masks = MaskBuffer(self.vocab, max_reqs, pin=self.device.type == "cuda")

    def guide(self, slot: int) -> RequestGuide | None:
        """The guide of the request in a slot (None: unconstrained)."""
        return self._guides[slot]

    def add_request(self, req_idx: int, sampling_params: Any) -> bool:
        guide = (
            self._new_guide(sampling_params, where=f"slot {req_idx}")
            if sampling_params is not None
            else None
        )
        self._guides[req_idx] = guide
        self._constrained[req_idx] = guide is not None
        return guide is not None

    def apply_staged_writes(self) -> None:
        return None

    def is_argmax_invariant(self) -> bool:
        """False: masking changes which token is the argmax (for callers that ask)."""
        return False

    def _fetch(self, slot: int, prompt_len: int, start: int, end: int) -> list[int]:
        ids = self.req_states.all_token_ids.gpu[slot, prompt_len + start : prompt_len + end]
        return [int(t) for t in ids.tolist()]

    def apply(self, logits: Any, ctx: Any) -> Any:
        import torch

        if not self._constrained[np.asarray(ctx.idx_mapping_np)].any():
            return logits
        # The one small device-to-host copy of the step.
        meta = torch.stack(
            [
                ctx.expanded_idx_mapping.to(torch.int64),
                ctx.expanded_local_pos.to(torch.int64),
                ctx.input_ids.to(torch.int64),
                ctx.pos.to(torch.int64),
            ]
        ).cpu()
        slot_of_row, local_pos, input_ids, pos = meta.tolist()
        per_slot: dict[int, list[int]] = {}
        for row, slot in enumerate(slot_of_row):
            if self._constrained[slot]:
                per_slot.setdefault(slot, []).append(row)
        if not per_slot:
            return logits
        prompt_lens = self.req_states.prompt_len.np
        main_guides: list[RequestGuide] = []
        main_rows: list[int] = []
        drafts: list[tuple[RequestGuide, list[int]]] = []
        for slot, rows in per_slot.items():
            guide = self._guides[slot]
            assert guide is not None
            rows.sort(key=lambda r: local_pos[r])
            first = rows[0]
            prompt_len = int(prompt_lens[slot])
            try:
                guide.sync_count(
                    pos[first] + 1 - prompt_len,
                    input_ids[first],
                    functools.partial(self._fetch, slot, prompt_len),
                )
            except Exception as e:  # never let one request take the engine down
                guide.fail(error_text(e))
            main_guides.append(guide)
            main_rows.append(first)
            if len(rows) > 1:
                drafts.append((guide, rows[1:]))

        def fill_drafts(bitmask: Any) -> list[int]:
            extra: list[int] = []
            for guide, rows in drafts:
                self._fill_drafts(guide, rows, input_ids, bitmask)
                extra.extend(rows)
            return extra

        return self._masks.mask_logits(logits, main_guides, main_rows, fill_drafts)

    def _fill_drafts(
        self, guide: RequestGuide, rows: list[int], input_ids: list[int], bitmask: Any
    ) -> None:
        """Mask draft rows: each after the draft tokens before it; then roll them back."""
        m = guide.matcher
        accepted = 0
        alive = guide.error is None and m is not None
        try:
            for row in rows:
                if alive and m is not None:
                    alive = m.accept_token(int(input_ids[row]))
                    if alive:
                        accepted += 1
                        m.fill_next_token_bitmask(bitmask, row)
                if not alive:
                    bitmask[row] = self._masks.eos_row
        except Exception as e:
            guide.fail(error_text(e))
            for row in rows:
                bitmask[row] = self._masks.eos_row
        finally:
            if accepted and m is not None:
                try:
                    m.rollback(accepted)
                except Exception as e:  # more drafts than the kept history
                    guide.fail(error_text(e))
