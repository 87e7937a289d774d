"""Constrained decoding in vLLM: tokensieve as vLLM's structured-output backend, and logits
processors for the V2 and V1 model runners.

The standard way: ``--scheduler-cls tokensieve.vllm.Scheduler`` (``LLM(...,
scheduler_cls="tokensieve.vllm.Scheduler")``) makes tokensieve compile and mask every request
that sends ``response_format``, ``structured_outputs`` or forced tool calls
(:mod:`tokensieve.vllm.backend`; the ``vllm.general_plugins`` entry point,
:mod:`tokensieve.vllm.plugin`, validates them at the door). ``Scheduler`` imports vLLM when it
is first looked up here.

The logits-processor way:

vLLM dropped its own ``guided_json`` / ``guided_regex`` request fields; these processors bring
them back through per-request ``SamplingParams.extra_args`` (``vllm_xargs`` on the OpenAI
server): one of ``guided_json``, ``guided_regex``, ``guided_choice``, ``guided_json_object``,
``guided_grammar`` (GBNF/EBNF text; its start rule ``guided_start``), plus options named as in
the Python API with a ``guided_`` prefix (``guided_whitespace`` …)::

    from vllm import LLM, SamplingParams
    from tokensieve.vllm import GuidedLogitsProcessor

    llm = LLM(model=..., logits_processors=[GuidedLogitsProcessor])   # V2 or V1 runner
    out = llm.generate("Year:", SamplingParams(extra_args={"guided_regex": "(19|20)[0-9]{2}"}))

``GuidedLogitsProcessor`` serves vLLM's V2 model runner and, built the V1 way (CPU hosts,
``VLLM_USE_V2_MODEL_RUNNER=0``), hands the V1 runner a ``GuidedLogitsProcessorV1``.
``vllm serve MODEL --logits-processors tokensieve.vllm:GuidedLogitsProcessor`` and
``{"vllm_xargs": {"guided_json": "{\\"type\\": \\"object\\"}"}}`` in a request body do the same
over HTTP. A malformed or unsupported constraint is rejected at admission (``validate_params``:
HTTP 400 with the reason); a failure later (a constraint this vocabulary cannot spell, a budget
hit, a token outside the grammar) finishes only that request (EOS only), with a log line.

This package imports without vLLM; vLLM is imported only to subclass its base classes when it
is installed.
"""

from tokensieve.constraints import Constraint, GrammarCache, compile_constraint, set_index_directory
from tokensieve.guides import RequestGuide
from tokensieve.vllm.constraints import GRAMMAR_CACHE, constraint_from_extra_args
from tokensieve.vllm.processor_base import (
    default_vocabulary,
    set_default_vocabulary,
    vocabulary_from_vllm_config,
)
from tokensieve.vllm.v1 import GuidedLogitsProcessorV1
from tokensieve.vllm.v2 import GuidedLogitsProcessor

__all__ = [
    "AsyncScheduler",
    "GRAMMAR_CACHE",
    "Constraint",
    "GrammarCache",
    "GuidedLogitsProcessor",
    "GuidedLogitsProcessorV1",
    "RequestGuide",
    "Scheduler",
    "TokensieveBackend",
    "compile_constraint",
    "constraint_from_extra_args",
    "default_vocabulary",
    "set_default_vocabulary",
    "set_index_directory",
    "vocabulary_from_vllm_config",
]


def __getattr__(name: str) -> object:
    # vLLM's scheduler classes are imported only when the backend is asked for
    if name in ("Scheduler", "AsyncScheduler", "TokensieveBackend"):
        from tokensieve.vllm import backend

        return getattr(backend, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
