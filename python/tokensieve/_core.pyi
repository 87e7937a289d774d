from collections.abc import Mapping, Sequence
from os import PathLike
from typing import Any, Literal

from typing_extensions import Self, disjoint_base, final

__version__: str
GRAMMAR_OPTIONS: list[str]
EBNF_OPTIONS: list[str]
GRAMMAR_OPTION_DEFAULTS: dict[str, float]
SCHEMA_OPTIONS: list[str]
MAX_VOCAB_SIZE: int
MAX_TOKEN_BYTES: int
__all__ = [
    "Vocabulary",
    "_PreparedVocabulary",
    "Grammar",
    "PendingGrammar",
    "Matcher",
    "fill_next_token_bitmask",
    "read_index_header",
    "constraint_hash",
    "compile_pool_stats",
    "TokensieveError",
    "RegexError",
    "BudgetError",
    "VocabularyError",
    "UnspellableError",
    "SchemaError",
    "GrammarError",
    "InternalError",
    "MAX_VOCAB_SIZE",
    "MAX_TOKEN_BYTES",
    "__version__",
    "GRAMMAR_OPTIONS",
    "EBNF_OPTIONS",
    "GRAMMAR_OPTION_DEFAULTS",
    "SCHEMA_OPTIONS",
    "_apply_token_bitmask_cpu",
]

class TokensieveError(Exception): ...

class RegexError(TokensieveError):
    offset: int

class BudgetError(TokensieveError): ...
class VocabularyError(TokensieveError): ...
class UnspellableError(TokensieveError): ...
class InternalError(TokensieveError): ...

class SchemaError(TokensieveError):
    keyword: str
    pointer: str

class GrammarError(TokensieveError):
    # a grammar's text: where the problem is; a structural tag: the JSON path of its node
    line: int | None
    column: int | None
    path: str | None

@final
class _PreparedVocabulary: ...

@disjoint_base
class Vocabulary:
    def __new__(
        cls,
        tokens: Sequence[bytes] | _PreparedVocabulary,
        eos_token_ids: Sequence[int],
        special_token_ids: Sequence[int] | None = None,
        vocab_size: int | None = None,
    ) -> Self: ...
    @classmethod
    def from_tokenizer_json(
        cls,
        json: str | bytes,
        vocab_size: int | None = None,
        eos_token_ids: Sequence[int] | None = None,
        eos_token_names: Sequence[str] = ...,
    ) -> Self: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def tokenizer_size(self) -> int: ...
    @property
    def kind(self) -> str: ...
    @property
    def eos_token_ids(self) -> list[int]: ...
    @property
    def special_token_ids(self) -> list[int]: ...
    @property
    def fingerprint(self) -> str: ...
    def token_bytes(self, token_id: int) -> bytes | None: ...
    def __len__(self) -> int: ...

@disjoint_base
class Grammar:
    @staticmethod
    def from_regex(
        pattern: str,
        vocab: Vocabulary,
        *,
        max_states: int | None = None,
        max_nfa_bytes: int | None = None,
        mask_cache_bytes: int | None = None,
        max_compile_seconds: float | None = None,
    ) -> Grammar: ...
    @staticmethod
    def from_json_schema(
        schema: Mapping[str, Any] | bool | str | type[Any],
        vocab: Vocabulary,
        *,
        additional_properties: Literal["allow", "forbid"] = "allow",
        formats: Literal["assert", "annotate"] = "assert",
        one_of: Literal["error", "any_of"] = "error",
        whitespace: str = "default",
        max_whitespace: int = 4,
        max_recursion_depth: int = 3,
        recursion: Literal["stack", "unroll"] = "stack",
        max_stack_depth: int = 128,
        max_nesting_depth: int = 64,
        truncate_recursion: bool = False,
        lenient: bool = False,
        literal_spelling: Literal["as_written", "any"] = "as_written",
        property_order: Literal["schema", "any"] = "schema",
        registry: Mapping[str, Any] | None = None,
        max_states: int | None = None,
        max_nfa_bytes: int | None = None,
        mask_cache_bytes: int | None = None,
        max_compile_seconds: float | None = None,
    ) -> Grammar: ...
    @staticmethod
    def from_json_object(
        vocab: Vocabulary,
        *,
        whitespace: str = "default",
        max_whitespace: int = 4,
        max_nesting_depth: int = 64,
        max_states: int | None = None,
        max_nfa_bytes: int | None = None,
        mask_cache_bytes: int | None = None,
        max_compile_seconds: float | None = None,
    ) -> Grammar: ...
    @staticmethod
    def compile_pending(
        kind: str,
        source: Any,
        vocab: Vocabulary,
        *,
        inline_seconds: float | None = None,
        **options: Any,
    ) -> PendingGrammar: ...
    @staticmethod
    def from_ebnf(
        text: str,
        vocab: Vocabulary,
        *,
        start: str = "root",
        max_stack_depth: int | None = None,
        max_states: int | None = None,
        max_nfa_bytes: int | None = None,
        mask_cache_bytes: int | None = None,
        max_compile_seconds: float | None = None,
    ) -> Grammar: ...
    @staticmethod
    def from_lark(
        text: str,
        vocab: Vocabulary,
        *,
        start: str = "start",
        max_stack_depth: int | None = None,
        max_states: int | None = None,
        max_nfa_bytes: int | None = None,
        mask_cache_bytes: int | None = None,
        max_compile_seconds: float | None = None,
    ) -> Grammar: ...
    @staticmethod
    def from_structural_tag(
        tag: str | Mapping[str, Any], vocab: Vocabulary, **options: Any
    ) -> Grammar: ...
    @staticmethod
    def from_choice(
        choices: Sequence[str],
        vocab: Vocabulary,
        *,
        max_states: int | None = None,
        max_nfa_bytes: int | None = None,
        mask_cache_bytes: int | None = None,
        max_compile_seconds: float | None = None,
    ) -> Grammar: ...
    @property
    def warnings(self) -> list[str]: ...
    @property
    def vocab(self) -> Vocabulary: ...
    @property
    def pattern(self) -> str:
        """The regex; for a JSON Schema grammar, a rendering for inspection (size only if large)."""
        ...
    @property
    def constraint_kind(self) -> str: ...
    @property
    def constraint(self) -> str: ...
    @property
    def source_hash(self) -> str: ...
    def precompute(self) -> dict[str, int | bool]: ...
    def save(self, path: str | PathLike[str]) -> None: ...
    def to_bytes(self) -> bytes: ...
    @staticmethod
    def load(
        path: str | PathLike[str], vocab: Vocabulary, *, mask_cache_bytes: int | None = None
    ) -> Grammar: ...
    @staticmethod
    def from_bytes(
        data: bytes, vocab: Vocabulary, *, mask_cache_bytes: int | None = None
    ) -> Grammar: ...
    def stats(self) -> dict[str, int | bool]: ...
    def matcher(
        self,
        max_rollback: int | None = None,
        max_tokens: int | None = None,
        reasoning_end: str | None = None,
        thinking_budget: int | None = None,
    ) -> Matcher: ...

@final
class PendingGrammar:
    @property
    def compile_seconds(self) -> float | None: ...
    def done(self) -> bool: ...
    def wait(self, timeout: float) -> bool: ...
    def result(self) -> Grammar: ...

@disjoint_base
class Matcher:
    @property
    def grammar(self) -> Grammar: ...
    @property
    def history_len(self) -> int: ...
    @property
    def state(self) -> int: ...
    @property
    def max_tokens(self) -> int | None: ...
    @max_tokens.setter
    def max_tokens(self, max_tokens: int | None) -> None: ...
    @property
    def consumed(self) -> int: ...
    @property
    def tokens_left(self) -> int | None: ...
    @property
    def reasoning_end(self) -> str | None: ...
    @property
    def thinking_budget(self) -> int | None: ...
    def is_reasoning(self) -> bool: ...
    @property
    def reasoning_tokens(self) -> int: ...
    def accept_token(self, token_id: int) -> bool: ...
    def accept_tokens(self, token_ids: Sequence[int]) -> int: ...
    def rollback(self, n: int) -> None: ...
    def reset(self) -> None: ...
    def is_finished(self) -> bool: ...
    def is_accepting(self) -> bool: ...
    def fill_next_token_bitmask(self, bitmask: Any, index: int = 0) -> None: ...

def fill_next_token_bitmask(
    matchers: Sequence[Matcher], bitmask: Any, indices: Sequence[int] | None = None
) -> None: ...
def read_index_header(path: str | PathLike[str]) -> dict[str, Any]: ...
def _apply_token_bitmask_cpu(
    logits_address: int,
    dtype_code: int,
    rows: int,
    row_stride: int,
    vocab_cols: int,
    bitmask_address: int,
    bitmask_rows: int,
    bitmask_words: int,
    indices: Sequence[int] | None,
    vocab_size: int,
) -> None: ...
def constraint_hash(kind: str, value: Any = None, **options: Any) -> str: ...
def compile_pool_stats() -> dict[str, int]: ...
