"""The triton apply kernel on a CUDA GPU: exact against unpack-and-``masked_fill`` everywhere.

Runs where torch sees a CUDA device and triton is installed; skips with the reason elsewhere
(the same kernel runs interpreted on CPU in ``test_kernels.py``, and is compiled for sm_80 and
sm_90 there without a GPU).
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from test_kernels import pack, reference

import tokensieve as ts

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

HAS_CUDA = torch is not None and torch.cuda.is_available()
pytestmark = [
    pytest.mark.skipif(
        not HAS_CUDA, reason="no CUDA GPU here (torch.cuda.is_available() is False)"
    ),
]

DTYPES = ["float32", "bfloat16", "float16"]
WIDTHS = [100, 4097, 32001, 128256, 151936]
BATCHES = [1, 8, 64, 1024]
DENSITIES = [0.0, 0.01, 0.5, 1.0]


def allowed_matrix(rows: int, cols: int, p: float, gen: Any) -> Any:
    """Independent bits at density `p`, plus (at 1% and 50%) some all-zero and all-one words."""
    allowed = torch.rand(rows, cols, generator=gen) < p
    if 0.0 < p < 1.0:
        words = cols // 32
        kind = torch.randint(0, 3, (rows, words), generator=gen)
        block = allowed[:, : words * 32].reshape(rows, words, 32)
        block[kind == 0] = False
        block[kind == 1] = True
    return allowed


def run_case(cols: int, batch: int, dtype: str, p: float, variant: str, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    words = (cols + 31) // 32
    allowed = allowed_matrix(batch, words * 32, p, gen)
    logits = torch.randn(batch, cols, generator=gen).to(getattr(torch, dtype))
    bitmask = pack(allowed, words)
    indices: Any = None
    vocab_size = None
    if variant == "list":
        indices = sorted(set(range(0, batch, 3)))
    elif variant == "tensor":
        indices = torch.tensor(sorted(set(range(1, batch, 2)) or {0}), dtype=torch.int32)
    elif variant == "vocab":
        vocab_size = max(1, cols - 37)
    ref_indices = indices.tolist() if isinstance(indices, torch.Tensor) else indices
    want = reference(logits, allowed, words, ref_indices, vocab_size)
    got = logits.cuda()
    dev_indices = indices.cuda() if isinstance(indices, torch.Tensor) else indices
    if variant == "strided":
        wide = torch.full((batch, cols + 64), 7.0, dtype=got.dtype, device="cuda")
        wide[:, 16 : 16 + cols] = got
        view = wide[:, 16 : 16 + cols]
        ts.apply_token_bitmask_inplace(view, bitmask.cuda(), backend="triton")
        assert torch.equal(view.cpu(), want), (cols, batch, dtype, p, variant)
        assert bool((wide[:, :16] == 7).all() and (wide[:, 16 + cols :] == 7).all())
        return
    if variant == "wide-mask":
        spare = pack(allowed, words + 9).cuda()[:, :words]  # row stride words + 9
        ts.apply_token_bitmask_inplace(got, spare, backend="triton")
    else:
        ts.apply_token_bitmask_inplace(
            got, bitmask.cuda(), indices=dev_indices, vocab_size=vocab_size, backend="triton"
        )
    assert torch.equal(got.cpu(), want), (cols, batch, dtype, p, variant)


VARIANTS = ["list", "tensor", "vocab", "strided", "wide-mask"]
CASES = [
    # every width, batch, dtype and density, rows in order
    *[
        (cols, batch, dtype, p, "plain")
        for cols, batch, dtype, p in itertools.product(WIDTHS, BATCHES, DTYPES, DENSITIES)
        if batch < 1024 or cols >= 128256
    ],
    # row indices (a list, a CUDA tensor), vocab_size below the width, strided logits rows, a
    # bitmask wider than needed with strided rows
    *[
        (cols, batch, dtype, p, variant)
        for cols, dtype, p, variant in itertools.product(WIDTHS, DTYPES, [0.01, 0.5], VARIANTS)
        for batch in [8, 64]
    ],
]


def test_the_sweep_is_large() -> None:
    assert len(CASES) >= 420


@pytest.mark.parametrize(("cols", "batch", "dtype", "p", "variant"), CASES)
def test_exact(cols: int, batch: int, dtype: str, p: float, variant: str) -> None:
    run_case(cols, batch, dtype, p, variant, seed=cols + batch + int(p * 100))


def test_cuda_graph_replay_with_new_bitmasks() -> None:
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(8, 128256, generator=gen).to(torch.bfloat16).cuda()
    bitmask = torch.zeros(8, 4008, dtype=torch.int32, device="cuda")
    work = logits.clone()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        ts.apply_token_bitmask_inplace(work, bitmask)  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ts.apply_token_bitmask_inplace(work, bitmask)
    for seed in range(3):
        allowed = allowed_matrix(8, 4008 * 32, 0.3, torch.Generator().manual_seed(seed))
        bitmask.copy_(pack(allowed, 4008).cuda())
        work.copy_(logits)
        graph.replay()
        torch.cuda.synchronize()
        want = reference(logits.cpu(), allowed, 4008)
        assert torch.equal(work.cpu(), want)


def test_inside_torch_compile() -> None:
    def step(x: Any, m: Any) -> Any:
        x = x * 1.0
        ts.apply_token_bitmask_inplace(x, m)
        return x

    gen = torch.Generator().manual_seed(4)
    logits = torch.randn(4, 32001, generator=gen).cuda()
    allowed = allowed_matrix(4, 1001 * 32, 0.1, gen)
    bitmask = pack(allowed, 1001).cuda()
    compiled = torch.compile(step, fullgraph=True)
    assert torch.equal(compiled(logits, bitmask).cpu(), reference(logits.cpu(), allowed, 1001))
