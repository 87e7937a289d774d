"""tokensieve.vllm against a real vLLM install: ``make test-vllm`` (tests/vllm/run.sh).

vLLM's own classes drive the processors: ``BatchUpdateBuilder`` / ``BatchUpdate`` /
``MoveDirectionality`` / ``SamplingParams(extra_args=...)`` for the V1 interface, and
``LogitsProcRequestState`` / ``LogitsContext`` for the V2 one, with a CPU ``VllmConfig``.
The processors are constructed directly: vLLM's ``build_logitsprocs`` also builds its built-in
processors, which want pinned memory (a GPU). The reference engine loops are the ones of
``tests/test_vllm_fake.py``, parameterized by these classes.

In the main venv (no vLLM) the whole module is skipped.
"""

from __future__ import annotations

import random
import re
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "vllm.v1.sample.logits_processor",
    reason="vLLM is not installed here; `make test-vllm` runs these tests in its own venv (VLLM_VENV, default .venv-vllm)",
)

import torch  # noqa: E402
from vllm import SamplingParams  # noqa: E402
from vllm.config import DeviceConfig, VllmConfig  # noqa: E402
from vllm.v1.sample.logits_processor import (  # noqa: E402
    BatchUpdateBuilder,
    MoveDirectionality,
)
from vllm.v1.sample.logits_processor import LogitsProcessor as V1LogitsProcessor  # noqa: E402
from vllm.v1.worker.gpu.sample.logits_processor import (  # noqa: E402
    LogitsContext,
    LogitsProcRequestState,
)
from vllm.v1.worker.gpu.sample.logits_processor import (  # noqa: E402
    LogitsProcessor as V2LogitsProcessor,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import test_vllm_fake as fake  # noqa: E402

import tokensieve as ts  # noqa: E402
from tokensieve.vllm import GuidedLogitsProcessor, GuidedLogitsProcessorV1  # noqa: E402

REAL_API = fake.VllmApi(
    BatchUpdateBuilder,
    MoveDirectionality.UNIDIRECTIONAL,
    MoveDirectionality.SWAP,
    SamplingParams,
)


@pytest.fixture(scope="module")
def vllm_config() -> Any:
    # VllmConfig() alone cannot infer a device on a host without a GPU.
    return VllmConfig(device_config=DeviceConfig(device="cpu"))


def v1(vllm_config: Any, vocab: ts.Vocabulary = fake.VOCAB) -> Any:
    return GuidedLogitsProcessorV1.with_vocabulary(vocab)(vllm_config, torch.device("cpu"), False)


def test_processors_implement_vllms_interfaces(vllm_config: Any) -> None:
    assert issubclass(GuidedLogitsProcessorV1, V1LogitsProcessor)
    assert issubclass(GuidedLogitsProcessor, V2LogitsProcessor)
    proc = v1(vllm_config)
    assert isinstance(proc, V1LogitsProcessor)
    assert proc.is_argmax_invariant() is False
    assert not GuidedLogitsProcessorV1.__abstractmethods__
    assert not GuidedLogitsProcessor.__abstractmethods__
    # one class for both runners: the V1 runner's loader accepts it and gets a V1 processor
    assert issubclass(GuidedLogitsProcessor, V1LogitsProcessor)
    from vllm.v1.sample.logits_processor import _load_custom_logitsprocs

    bound = GuidedLogitsProcessor.with_vocabulary(fake.VOCAB)
    (loaded,) = _load_custom_logitsprocs([bound])  # the V1 loader's subclass check
    # ... and its constructor call, as build_logitsprocs makes it
    proc = loaded(vllm_config, torch.device("cpu"), False)
    assert isinstance(proc, GuidedLogitsProcessorV1) and proc.vocab is fake.VOCAB


@pytest.mark.parametrize("seed", [0, 1])
def test_v1_random_walk_with_vllms_batch_updates(vllm_config: Any, seed: int) -> None:
    proc = v1(vllm_config)
    eng = fake.FakeEngine(proc, fake.VOCAB, api=REAL_API, seed=seed, width=fake.WIDTH)
    rng = random.Random(2000 + seed)
    for _ in range(3000):
        arrivals = [
            eng.new_request(rng.choice(fake.CONSTRAINTS), max_tokens=rng.randrange(1, 16))
            for _ in range(rng.choice([0, 0, 1, 1, 2, 3]))
        ]
        eng.step(arrivals)
    assert eng.checked_rows > 8000
    assert proc.constrained_rows == [i for i, r in enumerate(eng.slots) if r and r.constrained]


def test_v1_failures_finish_only_that_request(vllm_config: Any) -> None:
    proc = v1(vllm_config)
    eng = fake.FakeEngine(proc, fake.VOCAB, api=REAL_API, seed=5, width=fake.WIDTH)
    healthy = eng.new_request({"guided_regex": "(ab|c){1,4}0"}, max_tokens=30)
    broken = eng.new_request({"guided_regex": "zz"}, max_tokens=30, forced_eos=True)
    eng.step([healthy, broken], churn=0)
    victim = eng.new_request({"guided_regex": "(ab|c){1,4}0"}, max_tokens=30)
    eng.step([victim], churn=0)
    eng.step([], churn=0, corrupt=victim)
    victim.forced_eos = True
    for _ in range(8):
        eng.step([], churn=0)
    assert broken.output[-1] == fake.EOS and victim.output[-1] == fake.EOS
    assert healthy.grammar is not None
    assert healthy.grammar.matcher().accept_tokens(healthy.output) == len(healthy.output)


@pytest.mark.parametrize("extra_args,message", fake.BAD_REQUESTS)
def test_validate_params_with_vllms_sampling_params(extra_args: Any, message: str) -> None:
    params = SamplingParams(extra_args=extra_args)
    with pytest.raises(ValueError, match=re.escape(message)):
        GuidedLogitsProcessorV1.validate_params(params)
    with pytest.raises(ValueError, match=re.escape(message)):
        GuidedLogitsProcessor.validate_params(params)


def test_min_tokens_with_vllms_sampling_params_is_refused() -> None:
    params = SamplingParams(extra_args={"guided_regex": "[0-9]{3}"}, min_tokens=10)
    for proc in (GuidedLogitsProcessorV1, GuidedLogitsProcessor):
        with pytest.raises(ValueError, match="min_tokens=10 cannot be combined"):
            proc.validate_params(params)
    GuidedLogitsProcessorV1.validate_params(SamplingParams(extra_args={"guided_regex": "[0-9]"}))


def test_vllms_own_validation_hooks_load_and_call_ours() -> None:
    from vllm.exceptions import VLLMValidationError
    from vllm.v1.sample.logits_processor import validate_logits_processors_parameters
    from vllm.v1.worker.gpu.sample.logits_processor import (
        build_custom_logits_processors_params_validator,
    )

    good = SamplingParams(extra_args={"guided_regex": "[0-9]{3}"})
    bad = SamplingParams(extra_args={"guided_regex": "a(?=b)"})
    v1_fqcn = ["tokensieve.vllm:GuidedLogitsProcessorV1"]
    validate_logits_processors_parameters(v1_fqcn, good)
    # our ValueError reaches the client as vLLM's validation error (HTTP 400 when serving)
    with pytest.raises(VLLMValidationError, match="look-around"):
        validate_logits_processors_parameters(v1_fqcn, bad)
    validate_v2 = build_custom_logits_processors_params_validator(
        ["tokensieve.vllm:GuidedLogitsProcessor"]
    )
    validate_v2(good)
    with pytest.raises(VLLMValidationError, match="look-around"):
        validate_v2(bad)


def test_v1_without_model_config_asks_for_a_vocabulary(vllm_config: Any) -> None:
    assert vllm_config.model_config is None
    with pytest.raises(ValueError, match="with_vocabulary"):
        GuidedLogitsProcessorV1(vllm_config, torch.device("cpu"), False)


def _v2_batch(vllm_config: Any) -> Any:
    return fake.V2Batch(
        GuidedLogitsProcessor,
        fake.VOCAB,
        vllm_config,
        states_cls=LogitsProcRequestState,
        ctx_cls=LogitsContext,
    )


def test_v2_layout_with_vllms_context_classes(vllm_config: Any) -> None:
    fake.check_v2_layout_scenario(_v2_batch(vllm_config))


def test_v2_random_walk_with_vllms_context_classes(vllm_config: Any) -> None:
    assert fake.run_v2_random_walk(_v2_batch(vllm_config), seed=8, steps=1500) > 3000


def test_v2_processor_is_an_instance_of_vllms_base(vllm_config: Any) -> None:
    batch = _v2_batch(vllm_config)
    assert isinstance(batch.proc, V2LogitsProcessor)
    assert isinstance(batch.states, LogitsProcRequestState)


from shared_data import LLAMA3_DIR as LLAMA3  # noqa: E402  (tests/ is on the path)


def test_vocabulary_from_a_real_model_config(tmp_path: Path) -> None:
    """The engine path: vLLM's tokenizer and get_vocab_size() (padded past the tokenizer)."""
    if not (LLAMA3 / "tokenizer.json").is_file():
        pytest.skip(f"{LLAMA3} not found: needs ../shared/tokenizers")
    import shutil

    import transformers
    from vllm.config import ModelConfig

    for f in LLAMA3.iterdir():
        shutil.copy(f, tmp_path / f.name)
    transformers.LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=128320,
        max_position_embeddings=256,
    ).save_pretrained(tmp_path)
    config = VllmConfig(
        model_config=ModelConfig(model=str(tmp_path)), device_config=DeviceConfig(device="cpu")
    )
    proc = GuidedLogitsProcessorV1(config, torch.device("cpu"), False)
    assert proc.vocab.vocab_size == 128320
    assert proc.vocab.tokenizer_size == 128257
    assert 128001 in proc.vocab.eos_token_ids
    # built once per engine (tokenizer, vocab size): a second processor reuses it
    assert GuidedLogitsProcessorV1(config, torch.device("cpu"), False).vocab is proc.vocab
    out: list[int] = []
    params = SamplingParams(extra_args={"guided_regex": "(19|20)[0-9]{2}"})
    builder = BatchUpdateBuilder()
    builder.added.append((0, params, [1, 2], out))
    proc.update_state(builder.get_and_reset(1))
    logits = torch.zeros(1, 128320)
    allowed = torch.isfinite(proc.apply(logits)[0]).nonzero().flatten().tolist()
    texts = {proc.vocab.token_bytes(t) for t in allowed}
    assert texts and all(t is not None and t[:2] in (b"1", b"19", b"2", b"20") for t in texts)
