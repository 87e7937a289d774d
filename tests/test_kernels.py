"""apply_token_bitmask_inplace: every backend against ``logits.masked_fill(~allowed, -inf)``.

The ground truth is a random boolean ``allowed`` matrix; the bitmask under test is packed from
it, so the reference never shares unpacking code with the kernels. The triton kernel runs for
real under ``TRITON_INTERPRET=1`` on CPU tensors, in a subprocess (the variable must be set
before triton is imported).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import tokensieve as ts

HERE = Path(__file__).resolve()
TRITON_INNER = os.environ.get("TOKENSIEVE_TRITON_INNER") == "1"

try:
    import torch
except ImportError:  # pragma: no cover - exercised only without torch
    torch = None

needs_torch = pytest.mark.skipif(
    torch is None, reason="torch is not installed (pip install tokensieve[torch])"
)

ODD_VOCABS = [1, 31, 32, 33, 65, 32001, 128256, 128257, 151936]
DTYPES = ["float32", "float16", "bfloat16"]


def _run(code: str, env: dict[str, str] | None = None, timeout: float = 300) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc.stdout


# --- helpers ----------------------------------------------------------------------------------


def random_allowed(rows: int, cols: int, gen: Any) -> Any:
    """Random allowed-token matrix mixing all-zero, all-one, sparse, dense and 50% words."""
    words = (cols + 31) // 32
    kind = torch.randint(0, 5, (rows, words, 1), generator=gen)
    p = torch.tensor([0.0, 1.0, 0.03, 0.97, 0.5])[kind]
    allowed = torch.rand(rows, words, 32, generator=gen) < p
    return allowed.reshape(rows, words * 32)[:, :cols]


def pack(allowed: Any, words: int | None = None) -> Any:
    """Pack a bool ``[rows, cols]`` matrix into int32 ``[rows, words]`` (bit t%32 of word t//32)."""
    rows, cols = allowed.shape
    need = (cols + 31) // 32
    words = need if words is None else words
    padded = torch.zeros(rows, max(words, need) * 32, dtype=torch.bool)
    padded[:, :cols] = allowed
    padded = padded[:, : words * 32].reshape(rows, words, 32).to(torch.int64)
    packed = (padded << torch.arange(32)).sum(-1)
    return torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32)


def reference(
    logits: Any,
    allowed: Any,
    words: int,
    indices: list[int] | None = None,
    vocab_size: int | None = None,
) -> Any:
    """``logits.masked_fill(~allowed, -inf)`` on the masked rows, the rest untouched."""
    out = logits.clone()
    flat = out.dim() == 1
    out2 = out.unsqueeze(0) if flat else out
    cols = out2.shape[1]
    limit = min(cols if vocab_size is None else vocab_size, 32 * words, allowed.shape[1])
    ok = torch.zeros(allowed.shape[0], cols, dtype=torch.bool)
    ok[:, :limit] = allowed[:, :limit]
    rows = range(out2.shape[0]) if indices is None else indices
    for r in rows:
        out2[r] = out2[r].masked_fill(~ok[r], float("-inf"))
    return out


def make_case(
    rows: int,
    cols: int,
    dtype: str,
    seed: int,
    mask_rows: int | None = None,
    extra_words: int = 0,
) -> tuple[Any, Any, Any, int]:
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, cols, generator=gen).to(getattr(torch, dtype))
    mask_rows = rows if mask_rows is None else mask_rows
    words = (cols + 31) // 32 + extra_words
    allowed = random_allowed(mask_rows, 32 * words, gen)
    return logits, allowed, pack(allowed, words), words


def check(
    backend: str,
    rows: int,
    cols: int,
    dtype: str,
    seed: int = 0,
    indices: list[int] | None = None,
    vocab_size: int | None = None,
    mask_rows: int | None = None,
    extra_words: int = 0,
) -> None:
    logits, allowed, bitmask, words = make_case(rows, cols, dtype, seed, mask_rows, extra_words)
    want = reference(logits, allowed, words, indices, vocab_size)
    got = logits.clone()
    ts.apply_token_bitmask_inplace(
        got, bitmask, indices=indices, vocab_size=vocab_size, backend=backend
    )
    assert torch.equal(got, want), (backend, rows, cols, dtype, indices, vocab_size)


# --- cpu (Rust) and torch backends -------------------------------------------------------------


@needs_torch
@pytest.mark.parametrize("backend", ["cpu", "torch"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", ODD_VOCABS)
def test_matches_masked_fill(backend: str, dtype: str, cols: int) -> None:
    check(backend, 3, cols, dtype, seed=cols)
    # indices: rows 2 and 0 masked, row 1 untouched; the bitmask has a spare row
    check(backend, 3, cols, dtype, seed=cols + 1, indices=[2, 0], mask_rows=4)


@needs_torch
@pytest.mark.parametrize("backend", ["cpu", "torch"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_vocab_size_and_bitmask_width(backend: str, dtype: str) -> None:
    for cols, vocab_size in [(128256, 128000), (151936, 151646), (100, 1), (100, 0), (33, 32)]:
        check(backend, 2, cols, dtype, seed=vocab_size, vocab_size=vocab_size)
    # bitmask wider than needed; narrower than the logits (columns past 32*W are masked)
    check(backend, 2, 32001, dtype, extra_words=3)
    logits, allowed, _, _ = make_case(2, 200, dtype, seed=9)
    narrow = pack(allowed, 4)  # 128 columns
    got = logits.clone()
    ts.apply_token_bitmask_inplace(got, narrow, backend=backend)
    assert torch.equal(got, reference(logits, allowed, 4))
    assert torch.isneginf(got[:, 128:]).all()


@needs_torch
@pytest.mark.parametrize("backend", ["auto", "cpu", "torch"])
def test_larger_batches_and_index_patterns(backend: str) -> None:
    # enough work for the Rust kernel's parallel paths (row-parallel and column blocks)
    check(backend, 8, 32001, "float32", seed=1)
    check(backend, 2, 151936, "bfloat16", seed=2)
    check(backend, 8, 32001, "float16", seed=3, indices=[7, 1, 4])
    check(backend, 3, 1000, "float32", seed=4, indices=[])
    check(backend, 5, 1000, "float32", seed=5, indices=[4, 3, 2, 1, 0])
    # every row in order: taken as no index list; a spare bitmask row stays unused
    check(backend, 5, 1000, "float32", seed=6, indices=[0, 1, 2, 3, 4], mask_rows=6)


@needs_torch
@pytest.mark.parametrize("backend", ["cpu", "torch"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_one_dimensional(backend: str, dtype: str) -> None:
    for cols in [1, 33, 128257]:
        logits, allowed, bitmask, words = make_case(1, cols, dtype, seed=cols)
        got = logits[0].clone()
        ts.apply_token_bitmask_inplace(got, bitmask[0], backend=backend)
        assert torch.equal(got, reference(logits[0], allowed, words))
        got = logits[0].clone()
        ts.apply_token_bitmask_inplace(got, bitmask[0], vocab_size=cols // 2, backend=backend)
        assert torch.equal(got, reference(logits[0], allowed, words, vocab_size=cols // 2))


@needs_torch
@pytest.mark.parametrize("backend", ["cpu", "torch"])
def test_strided_rows_and_views(backend: str) -> None:
    """Rows of a wider buffer: the gaps and the other rows are never written."""
    gen = torch.Generator().manual_seed(3)
    base = torch.randn(4, 1050, generator=gen)
    view = base[1:, 7:1007]  # 3 rows of 1000, row stride 1050, offset start
    allowed = random_allowed(3, 1024, gen)
    bitmask_base = torch.zeros(3, 50, dtype=torch.int32)
    bitmask_base[:, 10:42] = pack(allowed)
    bitmask = bitmask_base[:, 10:42]  # strided bitmask rows are accepted (copied if needed)
    want = base.clone()
    want[1:, 7:1007] = reference(view, allowed, 32)
    ts.apply_token_bitmask_inplace(view, bitmask, backend=backend)
    assert torch.equal(base, want)


@needs_torch
def test_auto_picks_the_rust_kernel_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    from tokensieve import kernels

    calls: list[str] = []
    real = kernels._apply_cpu
    monkeypatch.setattr(kernels, "_apply_cpu", lambda *a: (calls.append("cpu"), real(*a)))
    monkeypatch.setattr(kernels, "_apply_torch", lambda *a: calls.append("torch"))
    check("auto", 2, 100, "float32")
    assert calls == ["cpu"]


@needs_torch
def test_version_counter_is_bumped() -> None:
    logits, _, bitmask, _ = make_case(2, 64, "float32", seed=0)
    before = logits._version
    ts.apply_token_bitmask_inplace(logits, bitmask)
    assert logits._version > before


@needs_torch
def test_dispatch_modes_see_the_custom_op() -> None:
    """With a dispatch mode active the call goes through the registered op (no eager shortcut)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: list[str] = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    logits, allowed, bitmask, words = make_case(2, 100, "float32", seed=0)
    want = reference(logits, allowed, words, indices=[1])
    with Record():
        ts.apply_token_bitmask_inplace(logits, bitmask, indices=[1])
    assert any("tokensieve.apply_token_bitmask_inplace" in s for s in seen), seen
    assert torch.equal(logits, want)


# --- bad input ----------------------------------------------------------------------------------


@needs_torch
@pytest.mark.parametrize("backend", ["auto", "cpu", "torch"])
def test_bad_input_raises_value_error(backend: str) -> None:
    logits = torch.zeros(2, 100)
    bitmask = torch.full((2, 4), -1, dtype=torch.int32)
    cases: list[tuple[str, dict[str, Any]]] = [
        ("float32, float16 or bfloat16", dict(logits=logits.double())),
        ("must have dtype torch.int32", dict(bitmask=bitmask.long())),
        ("must be 1-D or 2-D", dict(logits=logits[None])),
        ("must be 1-D or 2-D", dict(bitmask=bitmask[None])),
        ("must be a torch tensor", dict(logits=logits.numpy())),
        ("bitmask is on", dict(bitmask=bitmask.to("meta"))),
        ("last dimension of logits must be contiguous", dict(logits=torch.zeros(2, 200)[:, ::2])),
        (
            "last dimension of the bitmask must be contiguous",
            dict(bitmask=torch.full((2, 8), -1, dtype=torch.int32)[:, ::2]),
        ),
        ("rows overlap", dict(logits=torch.zeros(1, 100).expand(2, 100))),
        ("bitmask has 1 rows", dict(bitmask=bitmask[:1])),
        ("out of range", dict(indices=[2])),
        ("out of range", dict(indices=[-1])),
        ("out of range", dict(indices=[1], bitmask=bitmask[:1])),
        ("duplicates", dict(indices=[1, 1])),
        ("vocab_size must be in", dict(vocab_size=101)),
        ("vocab_size must be in", dict(vocab_size=-1)),
        ("bitmask has no words", dict(bitmask=torch.zeros(2, 0, dtype=torch.int32))),
        ("backend must be one of", dict(backend="cuda")),
        ("indices must be", dict(indices=torch.zeros(1, 1, dtype=torch.long))),
        ("indices must have an integer dtype", dict(indices=torch.zeros(1))),
    ]
    if backend == "cpu":
        cases.append(
            ("needs CPU tensors", dict(logits=logits.to("meta"), bitmask=bitmask.to("meta")))
        )
    for needle, override in cases:
        args: dict[str, Any] = {"logits": logits, "bitmask": bitmask, "backend": backend}
        args.update(override)
        with pytest.raises(ValueError, match=needle):
            ts.apply_token_bitmask_inplace(**args)
    assert not torch.isinf(logits).any()  # nothing was written by a rejected call


@needs_torch
def test_triton_backend_rejects_cpu_tensors_outside_interpret_mode() -> None:
    from tokensieve import kernels

    if kernels._triton_interpret():
        pytest.skip("TRITON_INTERPRET is set in this process")
    with pytest.raises(ValueError, match="needs CUDA tensors"):
        ts.apply_token_bitmask_inplace(
            torch.zeros(1, 40), torch.zeros(1, 2, dtype=torch.int32), backend="triton"
        )


@needs_torch
def test_rust_kernel_refuses_aliased_buffers() -> None:
    storage = torch.zeros(64, dtype=torch.int32)
    logits = storage.view(torch.float32)  # the same memory as the bitmask
    with pytest.raises(ValueError, match="share memory"):
        ts.apply_token_bitmask_inplace(logits, storage[:2], backend="cpu")


# --- torch.compile ----------------------------------------------------------------------------


def _compiled_step(logits: Any, bitmask: Any) -> Any:
    x = logits * 2.0
    ts.apply_token_bitmask_inplace(x, bitmask, indices=[0, 2], vocab_size=90)
    return torch.softmax(x, dim=-1)


@needs_torch
def test_torch_compile_fullgraph_no_graph_breaks() -> None:
    import torch._dynamo

    torch._dynamo.reset()
    logits, _, bitmask, _ = make_case(3, 100, "float32", seed=11)
    eager = _compiled_step(logits, bitmask)
    compiled = torch.compile(_compiled_step, backend="aot_eager", fullgraph=True)
    assert torch.allclose(compiled(logits, bitmask), eager, equal_nan=True)
    explanation = torch._dynamo.explain(_compiled_step)(logits, bitmask)
    assert explanation.graph_break_count == 0
    assert explanation.graph_count == 1
    graph_code = "".join(g.code for g in explanation.graphs)
    assert "tokensieve.apply_token_bitmask_inplace" in graph_code
    # shape errors surface at trace time through the fake implementation
    with pytest.raises(Exception, match="bitmask must have dtype torch.int32"):
        compiled(logits, bitmask.long())


@needs_torch
def test_torch_compile_in_a_fresh_process() -> None:
    """The op is registered while dynamo traces the first call: no eager call before."""
    out = _run(
        """
        import tokensieve as ts
        import torch

        def step(logits, bitmask):
            x = logits + 1.0
            ts.apply_token_bitmask_inplace(x, bitmask, vocab_size=40)
            return x

        logits = torch.zeros(2, 64)
        bitmask = torch.tensor([[5, 0], [-1, -1]], dtype=torch.int32)
        out = torch.compile(step, backend="aot_eager", fullgraph=True)(logits, bitmask)
        print(torch.isfinite(out).sum(dim=1).tolist())
        """
    )
    assert out.strip().splitlines()[-1] == "[2, 40]"


# --- torch stays optional -----------------------------------------------------------------------


def test_import_does_not_need_torch() -> None:
    out = _run(
        """
        import sys
        sys.modules["torch"] = None  # `import torch` now raises ImportError
        import tokensieve
        assert "apply_token_bitmask_inplace" in tokensieve.__all__
        try:
            tokensieve.apply_token_bitmask_inplace(None, None)
        except ImportError as e:
            print("ImportError:", e)
        """
    )
    assert "pip install tokensieve[torch]" in out


def test_import_does_not_import_torch() -> None:
    _run("import sys, tokensieve; assert 'torch' not in sys.modules, 'torch was imported'")


# --- triton (interpreted on CPU tensors, in a subprocess) --------------------------------------


@needs_torch
def test_triton_backend_interpreted() -> None:
    pytest.importorskip("triton", reason="triton is not installed (pip install triton)")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(HERE),
            "-k",
            "triton_inner",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "TRITON_INTERPRET": "1", "TOKENSIEVE_TRITON_INNER": "1"},
    )
    tail = proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.returncode == 0, tail
    assert " passed" in proc.stdout and "skipped" not in proc.stdout, tail


@needs_torch
@pytest.mark.filterwarnings("ignore:TRITON_DEFAULT_FP_FUSION")
def test_triton_kernel_compiles_for_cuda_without_a_gpu() -> None:
    """The interpreter skips triton's compiler; compile ahead of time for sm_80 and sm_90 (PTX)
    as well, for every dtype, with and without row indices."""
    triton = pytest.importorskip("triton", reason="triton is not installed (pip install triton)")
    from tokensieve import kernels

    if kernels._triton_interpret():
        pytest.skip("TRITON_INTERPRET is set in this process")
    try:
        from triton.backends.compiler import GPUTarget
    except ImportError as e:  # pragma: no cover - other triton layouts
        pytest.skip(f"no triton.backends.compiler.GPUTarget: {e}")
    kernel = kernels._triton_kernel()
    for arch in [80, 90]:
        for dtype in ["fp32", "fp16", "bf16"]:
            for has_indices in [False, True]:
                signature = {
                    "logits_ptr": f"*{dtype}",
                    "bitmask_ptr": "*i32",
                    "indices_ptr": "*i32",
                    "num_cols": "i32",
                    "limit": "i32",
                    "logits_row_stride": "i64",
                    "bitmask_row_stride": "i32",
                    "HAS_INDICES": "constexpr",
                    "WORDS": "constexpr",
                }
                constexprs = {"HAS_INDICES": has_indices, "WORDS": kernels._TRITON_WORDS_PER_BLOCK}
                # what triton's launcher assumes of 16-aligned pointers and strides that are
                # multiples of 16 (the vocabularies' rows: 128,256 and 151,936 columns)
                aligned = [["tt.divisibility", 16]]
                attrs = {(i,): aligned for i in (0, 1, 2, 5, 6)}
                src = triton.compiler.ASTSource(
                    fn=kernel, signature=signature, constexprs=constexprs, attrs=attrs
                )
                try:
                    compiled = triton.compile(src, target=GPUTarget("cuda", arch, 32))
                except (RuntimeError, FileNotFoundError) as e:  # pragma: no cover - no ptxas
                    if "ptxas" in str(e) or "not found" in str(e).lower():
                        pytest.skip(f"triton cannot compile for CUDA here: {e}")
                    raise
                ptx = compiled.asm["ptx"]
                assert f".target sm_{arch}" in ptx, (arch, ptx[:400])
                # the logits are read and written with 16-byte vector instructions (predicated
                # per word), not one scalar access per column
                assert "st.global.v4" in ptx and "ld.global.v4" in ptx, (arch, dtype, has_indices)


if TRITON_INNER:
    # Collected only in the subprocess above, where TRITON_INTERPRET=1 is set before triton is
    # imported; every call must launch the interpreted triton kernel (no fallback).

    @pytest.fixture(autouse=True)
    def _triton_only(monkeypatch: pytest.MonkeyPatch) -> Any:
        from tokensieve import kernels

        def refuse(*_: Any) -> None:
            raise AssertionError("a non-triton backend ran")

        monkeypatch.setattr(kernels, "_apply_cpu", refuse)
        monkeypatch.setattr(kernels, "_apply_torch", refuse)
        kernels._triton_kernel()
        assert kernels._TRITON_STATE["interpret"], "triton is not in interpreter mode"
        assert type(kernels._TRITON_STATE["kernel"]).__name__ == "InterpretedFunction"
        before = kernels._TRITON_STATE["launches"]
        yield
        assert kernels._TRITON_STATE["launches"] > before, "the triton kernel never launched"

    @pytest.mark.parametrize("dtype", DTYPES)
    @pytest.mark.parametrize("cols", [1, 31, 33, 64, 100])
    def test_triton_inner_small(dtype: str, cols: int) -> None:
        check("triton", 3, cols, dtype, seed=cols)
        check("triton", 3, cols, dtype, seed=cols + 1, indices=[2, 0], mask_rows=4)
        check("triton", 2, cols, dtype, seed=cols + 2, vocab_size=cols // 2, extra_words=2)

    @pytest.mark.parametrize("dtype", DTYPES)
    def test_triton_inner_odd_vocab(dtype: str) -> None:
        check("triton", 2, 32001, dtype, seed=7, vocab_size=32000)
        check("triton", 2, 32001, dtype, seed=8, indices=[1], mask_rows=3)
        check("triton", 2, 32001, dtype, seed=9, indices=[0, 1], mask_rows=3)

    @pytest.mark.parametrize("dtype", DTYPES)
    def test_triton_inner_whole_blocks(dtype: str) -> None:
        """Rows of several whole blocks (the vector path) and a tail: rows with nothing and
        everything allowed, `vocab_size` cutting a block, a word or the last block, a bitmask
        wider than needed whose rows are strided."""
        from tokensieve import kernels

        block = 32 * kernels._TRITON_WORDS_PER_BLOCK
        cols = 3 * block + 77
        gen = torch.Generator().manual_seed(11)
        words = (cols + 31) // 32 + 3
        allowed = random_allowed(5, 32 * words, gen)
        allowed[0] = False
        allowed[1] = True
        logits = torch.randn(5, cols, generator=gen).to(getattr(torch, dtype))
        wide = pack(allowed, words + 5)
        bitmask = wide[:, :words]  # row stride words + 5
        for vocab_size in [None, cols - 5, block + 40, 2 * block, block - 1, 16]:
            for indices in [None, [4, 1, 0]]:
                want = reference(logits, allowed, words, indices, vocab_size)
                got = logits.clone()
                ts.apply_token_bitmask_inplace(
                    got, bitmask, indices=indices, vocab_size=vocab_size, backend="triton"
                )
                assert torch.equal(got, want), (dtype, vocab_size, indices)

    def test_triton_inner_one_dimensional_and_strided() -> None:
        logits, allowed, bitmask, words = make_case(1, 77, "float32", seed=1)
        got = logits[0].clone()
        ts.apply_token_bitmask_inplace(got, bitmask[0], backend="triton")
        assert torch.equal(got, reference(logits[0], allowed, words))
        base = torch.randn(3, 90)
        view = base[:, 5:85]
        allowed = random_allowed(3, 96, torch.Generator().manual_seed(0))
        want = base.clone()
        want[:, 5:85] = reference(view, allowed, 3)
        ts.apply_token_bitmask_inplace(view, pack(allowed), backend="triton")
        assert torch.equal(base, want)

    def test_triton_inner_auto_does_not_pick_triton_on_cpu() -> None:
        from tokensieve import kernels

        plan = kernels._validate(
            torch, torch.zeros(1, 4), torch.zeros(1, 1, dtype=torch.int32), None, None, "auto"
        )
        assert plan.backend == "cpu"
        ts.apply_token_bitmask_inplace(
            torch.zeros(1, 4), torch.zeros(1, 1, dtype=torch.int32), backend="triton"
        )
