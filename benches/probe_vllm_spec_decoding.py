"""Structured outputs with n-gram speculative decoding in vLLM's CPU engine, per backend.

vLLM 0.32.0's CPU build runs n-gram (prompt lookup) speculative decoding, but with structured
outputs its engine samples tokens outside the mask ("grammar rejected tokens [0]", the request
ends with an error) whatever the backend: this script shows it. One bounded schema, 12
requests, 3 drafts; prints each output, whether it validates, and the count of invalid ones.
The backend's own draft handling is tested through vLLM's StructuredOutputManager in
``tests/vllm/test_vllm_backend.py`` (``test_vllm_manager_drives_drafts_exactly``).

Run with the vLLM venv of ``make test-vllm``::

    VLLM_CPU_KVCACHE_SPACE=1 .venv-vllm/bin/python benches/probe_vllm_spec_decoding.py tokensieve
    (or xgrammar, guidance)
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "vllm"))
sys.path.insert(0, str(HERE))

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "age": {"type": "integer", "minimum": 0, "maximum": 99},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}
PROMPT = (
    'Examples: {"name":"Bob","age":42} {"name":"Al","age":7, "extra": true} '
    '{"name":"Bob","age":420} 1999-12 2024-13 yes, maybe later. Now:'
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("backend", choices=["tokensieve", "xgrammar", "guidance"])
    args = ap.parse_args()
    import jsonschema
    from common import SHARED_TOKENIZERS
    from tiny_model import build_tiny_llama
    from vllm import LLM, SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    kw: dict = (
        {"scheduler_cls": "tokensieve.vllm.Scheduler"}
        if args.backend == "tokensieve"
        else {"structured_outputs_config": {"backend": args.backend}}
    )
    with tempfile.TemporaryDirectory() as tmp:
        model = build_tiny_llama(Path(tmp), SHARED_TOKENIZERS / "llama3")
        llm = LLM(
            model=str(model),
            dtype="float32",
            enforce_eager=True,
            max_model_len=512,
            seed=0,
            speculative_config={
                "method": "ngram",
                "num_speculative_tokens": 3,
                "prompt_lookup_max": 3,
                "prompt_lookup_min": 1,
            },
            **kw,
        )
        params = [
            SamplingParams(
                max_tokens=60,
                seed=i,
                temperature=0.0 if i % 2 else 1.0,
                structured_outputs=StructuredOutputsParams(json=SCHEMA),
            )
            for i in range(12)
        ]
        outs = llm.generate([PROMPT] * len(params), params, use_tqdm=False)
    bad = 0
    for o in outs:
        c = o.outputs[0]
        try:
            jsonschema.validate(json.loads(c.text), SCHEMA)
            ok = True
        except Exception:
            ok, bad = False, bad + 1
        print(ok, c.finish_reason, repr(c.text[:80]))
    print(f"{args.backend}: {bad} of {len(outs)} outputs invalid")


if __name__ == "__main__":
    main()
