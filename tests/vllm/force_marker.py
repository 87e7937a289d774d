"""A test-only vLLM (V1) logits processor that makes a random model write a reasoning span.

A request with ``extra_args["test_force_after"] = K`` and ``extra_args["test_force_ids"] =
[ids...]`` is left alone for its first K output tokens, then made to emit those ids one by one
(every other logit set to ``-inf``). The engine tests use it to end a random model's reasoning
with an end marker split over several tokens; a random model would never write one itself.
"""

from __future__ import annotations

from typing import Any

from vllm.v1.sample.logits_processor import LogitsProcessor


class ForceMarker(LogitsProcessor):
    def __init__(self, vllm_config: Any, device: Any, is_pin_memory: bool) -> None:
        # batch index -> (K, ids, live output list)
        self.rows: dict[int, tuple[int, list[int], list[int]]] = {}

    def is_argmax_invariant(self) -> bool:
        return False

    def update_state(self, batch_update: Any) -> None:
        if batch_update is None:
            return
        for index in batch_update.removed:
            self.rows.pop(index, None)
        for added in batch_update.added:
            index, params, output = added[0], added[1], added[-1]
            extra = getattr(params, "extra_args", None) or {}
            if "test_force_after" in extra:
                self.rows[index] = (
                    int(extra["test_force_after"]),
                    [int(i) for i in extra["test_force_ids"]],
                    output,
                )
            else:
                self.rows.pop(index, None)
        for src, dst, direction in batch_update.moved:
            a, b = self.rows.pop(src, None), self.rows.pop(dst, None)
            if a is not None:
                self.rows[dst] = a
            if b is not None and getattr(direction, "name", "").upper().endswith("SWAP"):
                self.rows[src] = b

    def apply(self, logits: Any) -> Any:
        for index, (after, ids, output) in self.rows.items():
            k = len(output) - after
            if index < logits.shape[0] and 0 <= k < len(ids):
                keep = logits[index, ids[k]].clone()
                logits[index] = float("-inf")
                logits[index, ids[k]] = keep
        return logits
