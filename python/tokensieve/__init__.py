"""tokensieve: constrained decoding with token-level FSM indexes and packed token bitmasks.

Compile a regex for a tokenizer's vocabulary, then ask, at every decoding step, which tokens
may come next::

    import tokensieve as ts
    vocab = ts.Vocabulary.from_pretrained("path/to/tokenizer.json")
    grammar = ts.Grammar.from_regex(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", vocab)
    matcher = grammar.matcher()
    bitmask = ts.allocate_token_bitmask(1, vocab.vocab_size)
    matcher.fill_next_token_bitmask(bitmask)
"""

from tokensieve._core import (
    BudgetError,
    Grammar,
    GrammarError,
    InternalError,
    Matcher,
    RegexError,
    SchemaError,
    TokensieveError,
    UnspellableError,
    VocabularyError,
    __version__,
)
from tokensieve.bitmask import allocate_token_bitmask, bitmask_words, fill_next_token_bitmask
from tokensieve.kernels import apply_token_bitmask_inplace
from tokensieve.vocabulary import Vocabulary

__all__ = [
    "BudgetError",
    "Grammar",
    "GrammarError",
    "InternalError",
    "Matcher",
    "RegexError",
    "SchemaError",
    "TokensieveError",
    "UnspellableError",
    "Vocabulary",
    "VocabularyError",
    "__version__",
    "allocate_token_bitmask",
    "apply_token_bitmask_inplace",
    "bitmask_words",
    "fill_next_token_bitmask",
]
