"""tokensieve as an SGLang grammar backend: ``--grammar-backend tokensieve``.

SGLang loads general plugins from the ``sglang.srt.plugins`` entry-point group in every
process (the launcher before it parses its arguments, the scheduler, ...); tokensieve's entry
point is :func:`register`, which adds the backend to SGLang's grammar backend registry and to
the choices of ``--grammar-backend``. See ``docs/sglang.md``.

This module imports without SGLang; :func:`register` and :mod:`tokensieve.sglang.backend`
need it (``pip install sglang``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["BACKEND_NAME", "create_backend", "register"]

BACKEND_NAME = "tokensieve"


def register() -> None:
    """Register the ``tokensieve`` grammar backend with SGLang (idempotent).

    The ``sglang.srt.plugins`` entry point: SGLang calls it with no arguments. Adds the name
    to ``--grammar-backend``'s choices and the backend factory to SGLang's registry, which
    ``create_grammar_backend`` consults before its built-in backends."""
    from tokensieve.sglang.backend import register_backend

    register_backend(BACKEND_NAME)


def create_backend(
    server_args: Any, tokenizer: Any, vocab_size: int, eos_token_ids: Any = None
) -> Any:
    """The factory SGLang's registry calls: a :class:`~tokensieve.sglang.backend.
    TokensieveGrammarBackend` for the engine's tokenizer and logits width, wrapped in SGLang's
    ``ReasonerGrammarBackend`` when the server runs with ``--reasoning-parser``."""
    from tokensieve.sglang.backend import create_backend as create

    return create(server_args, tokenizer, vocab_size, eos_token_ids)
