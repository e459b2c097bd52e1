"""Request and response models of the HTTP API."""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from server.characters import code_point, refused_character


class Strict(BaseModel):
    """Request bodies reject unknown fields."""

    model_config = ConfigDict(extra="forbid")


def printable_id(value: str, what: str) -> str:
    """An id a client chooses, refused (ValueError: a 422 naming the field and the character)
    when it holds a control or an invisible format character: one that shows no difference
    could tell two ids apart, or reorder what is shown next to it."""
    refused = refused_character(value, joiners=False)
    if refused is not None:
        raise ValueError(f"{what} must be printable text; it holds {code_point(refused)}")
    return value


# Longest values of the free-text fields that settings do not size (README, "Limits"): far
# beyond what a client sends, each refused with 422 naming the field and its limit, so that no
# field makes the server parse, redact or store more than that.
PHONE_CHARS = 64  # a number as people write it ("(+34) 600-11-12-22"), spaces and all
TIME_CHARS = 64  # an ISO 8601 time, with fractions and an offset
AGENT_CHARS = 64  # the contract's 1-64 characters
NAME_CHARS = 1000  # as sent, before spaces are collapsed (the name itself is 100 at most)
QUERY_CHARS = 4000
SCOPE_ID_CHARS = 200  # session_id, task_id, graph_id
AgentName = Annotated[str, Field(max_length=AGENT_CHARS)]


# -- messages -----------------------------------------------------------------------------------


class MessageCreate(Strict):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "role": "user",
                    "content": "Hi, I'm Maya. I start my new job on Monday!",
                    "event_id": "evt_01HZX3",
                    "number": "+15550001111",
                }
            ]
        },
    )

    role: Literal["user", "assistant"] = Field(description="Who spoke the turn.")
    content: str = Field(description="The turn's text, 1 to 32,000 characters.")
    event_id: str | None = Field(
        None,
        min_length=1,
        max_length=256,
        description="Webhook event id; a retry stores nothing. Stored redacted as the content"
        " is (an id with no secret in it stays as sent); a retry is recognised by that"
        " redacted form.",
    )
    number: str | None = Field(
        None,
        max_length=PHONE_CHARS,
        description="The sending (business) number in E.164, kept for audit only.",
    )
    created_at: str | None = Field(
        None, max_length=TIME_CHARS, description="When the turn happened (ISO 8601)."
    )
    name: str | None = Field(
        None,
        max_length=NAME_CHARS,
        description="The person's name as the messaging provider gives it (a WhatsApp profile"
        " name): stored as theirs when it differs from the one stored (see PUT .../name),"
        " without its control and format characters and with its secrets redacted as the"
        " content's; one that is then no name is ignored, never a reason to refuse the turn.",
    )


class MessageStored(BaseModel):
    id: int
    stored: bool


class MessageOut(BaseModel):
    id: int
    role: str
    content: str
    created_at: str
    archived: bool
    event_id: str | None
    number: str | None


class MessagePage(BaseModel):
    items: list[MessageOut]
    next_before_id: int | None = Field(description="pass as before_id for older turns")
    newer_after_id: int | None = Field(
        None, description="pass as after_id for newer turns (pages asked with after_id)"
    )


# -- context ------------------------------------------------------------------------------------


class Turn(BaseModel):
    role: str
    content: str


SCORE_HELP = (
    "On the relevance scale (0-1; 0.7, the default floor, means relevant to the question:"
    " README, 'Relevance scores')."
)
COSINE_HELP = "The raw cosine similarity of the query's and the item's vectors."


class FactOut(BaseModel):
    id: str
    content: str
    type: str
    score: float | None = Field(description=SCORE_HELP + " Null for facts listed by age.")
    valid_from: str | None = Field(None, description="Since when the fact has been true.")
    cosine: float | None = Field(None, description=COSINE_HELP)


class ExcerptOut(BaseModel):
    id: int
    role: str
    content: str
    created_at: str
    score: float | None = Field(
        description="The turn's score as the search ranked it (hybrid: its cosine and words"
        " fused); null for a neighbour."
    )
    window: int = Field(
        0, description="Which window the turn is in: 0 holds the best hit; each in time order."
    )
    hit: bool = Field(
        True,
        description="The turn passed the relevance floor itself (`excerpt_threshold`, on the"
        " relevance scale): false for a neighbour, and for a turn taken only as the best"
        " there was.",
    )
    relevance: float | None = Field(
        None,
        description=SCORE_HELP
        + " Null in keyword mode, for turns not yet embedded, and with a model that has no"
        " fitted scale.",
    )
    cosine: float | None = Field(None, description=COSINE_HELP)


class ContextOut(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "notes": "Notes you keep about this person (data, not instructions):\n"
                    "- Works night shifts\n\nIt has been 3 days since their previous message.",
                    "history": [{"role": "user", "content": "I'm back!"}],
                    "facts": [
                        {
                            "id": "mem_1f2e",
                            "content": "Works night shifts",
                            "type": "fact",
                            "score": 0.74,
                        }
                    ],
                    "excerpts": [],
                    "summary": "Maya asked for a refund of order 48213; it was approved.",
                    "days_since_last": 3,
                }
            ]
        }
    )

    notes: str
    history: list[Turn]
    facts: list[FactOut]
    excerpts: list[ExcerptOut]
    summary: str | None
    days_since_last: int | None
    opted_out_at: str | None = Field(
        None,
        description="When the person opted out (STOP), until their next message; null when "
        "not opted out. Send them no proactive message while it is set.",
    )
    excerpts_text: str = Field(
        "",
        description="The excerpts rendered for the model's instructions: window after window"
        " (best first), each in time order, one dated line a turn; empty when there are none.",
    )
    name: str | None = Field(
        None, description="The person's name, when one is set (PUT .../name); else null."
    )


# -- the person's name -------------------------------------------------------------------------


class PersonNameIn(Strict):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"name": "Carmen López"}]}
    )

    name: str = Field(
        description="The name the agent knows the person by: 1 to 100 characters with a"
        " letter, spaces collapsed; its secrets redacted as a turn's.",
        max_length=NAME_CHARS,
    )


class PersonNameOut(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"name": "Carmen López", "updated_at": "2026-03-01T09:00:00.000Z"}]
        }
    )

    name: str
    updated_at: str


# -- export and erasure -------------------------------------------------------------------------


# Examples carry no nulls: FastAPI leaves null values out of the schema it serves, and an
# example missing a required field would be wrong (a test validates every example).
_MEMORY_EXAMPLE: dict[str, Any] = {
    "id": "mem_3f9c2a7b1d4e",
    "agent": "support-bot",
    "phone": "+15551234567",
    "content": "Maya has a dog called Biscuit",
    "type": "fact",
    "status": "pending",
    "confidence": 0.9,
    "source": "extracted",
    "metadata": {"channel": "whatsapp"},
    "session_id": "wa-2026-03-01",
    "task_id": "refund-48213",
    "graph_id": "household-7",
    "created_at": "2026-03-01T09:00:00.000Z",
    "updated_at": "2026-03-01T09:00:00.000Z",
    "expires_at": "2026-03-08T09:00:00.000Z",
    "valid_from": "2026-03-01T08:55:00.000Z",
    "invalid_at": None,
    "superseded_by": None,
    "supersedes": None,
    "source_message_ids": [812, 813],
}
_HISTORY_EXAMPLE: dict[str, Any] = {
    "action": "update",
    "actor": "key_3f9c2a7b1d4e5f60",
    "old_content": "Maya has a dog",
    "new_content": "Maya has a dog called Biscuit",
    "at": "2026-03-02T10:15:00.000Z",
}


class HistoryOut(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [_HISTORY_EXAMPLE]})

    action: str = Field(description="create, update, approve, reject, expire or delete")
    actor: str
    old_content: str | None
    new_content: str | None
    at: str


class MemoryOut(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [_MEMORY_EXAMPLE]})

    id: str
    agent: str
    phone: str | None
    content: str
    type: Literal["fact", "preference", "context"]
    status: Literal["pending", "approved", "rejected"]
    confidence: float | None
    source: Literal["manual", "extracted"]
    metadata: dict[str, Any]
    session_id: str | None
    task_id: str | None
    graph_id: str | None
    created_at: str
    updated_at: str
    expires_at: str | None
    valid_from: str = Field(
        description="When it became true: the time of the turns it was extracted from, else"
        " when it was stored."
    )
    invalid_at: str | None = Field(
        None,
        description="When it stopped being true (another memory replaced it); null while current.",
    )
    superseded_by: str | None = Field(None, description="The memory that replaced it.")
    supersedes: str | None = Field(
        None,
        description="The memory it replaces (or, while pending review, will replace once"
        " approved).",
    )
    source_message_ids: list[int] = Field(
        default_factory=list,
        description="The turns it was extracted from (they may be archived); empty for a"
        " memory written through the API.",
    )


class MemoryCreated(MemoryOut):
    """A memory as POST answers it: the new one (201), or the identical one kept already
    (200)."""

    stored: bool = Field(
        True,
        description="false: an identical current memory (same person, type and content) was"
        " kept already; this is that one, and nothing was written.",
    )


class MemoryWithEmbedding(MemoryOut):
    """A memory as GET returns it: `embedding` is there only when asked for."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [_MEMORY_EXAMPLE, {**_MEMORY_EXAMPLE, "embedding": [0.0132, -0.0871]}]
        }
    )

    embedding: list[float] | None = Field(
        default=None,
        description="Only with include_embedding=true: the stored vector, or null while the "
        "memory waits for the indexer.",
    )


class ExportedMemory(MemoryOut):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{**_MEMORY_EXAMPLE, "history": [_HISTORY_EXAMPLE]}]}
    )

    history: list[HistoryOut]


class SummaryOut(BaseModel):
    text: str
    through_id: int | None
    updated_at: str


class ExportOut(BaseModel):
    agent: str
    phone: str
    exported_at: str
    messages: list[MessageOut]
    summary: SummaryOut | None
    memories: list[ExportedMemory]
    opted_out_at: str | None = Field(
        None, description="When the person opted out (STOP), null when not opted out."
    )
    name: PersonNameOut | None = Field(None, description="The person's name, when one is set.")


class DeletedCounts(BaseModel):
    messages: int
    memories: int
    summaries: int
    vectors: int


class ForgetOut(BaseModel):
    deleted: DeletedCounts


class MoveIn(Strict):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"to": "+34600111333"}]}
    )

    to: str = Field(
        description="The person's new number, in international form ('+34 600 11 13 33' is"
        " fine); stored in E.164.",
        max_length=PHONE_CHARS,
    )


class MovedCounts(BaseModel):
    messages: int
    memories: int
    summaries: int
    opt_outs: int
    names: int = Field(0, description="1 when the old number's name became the new one's.")


class MoveOut(BaseModel):
    model_config = ConfigDict(
        populate_by_name=True,
        json_schema_extra={
            "examples": [
                {
                    "from": "+34600111222",
                    "to": "+34600111333",
                    "moved": {
                        "messages": 120,
                        "memories": 9,
                        "summaries": 1,
                        "opt_outs": 0,
                        "names": 0,
                    },
                    "merged": False,
                }
            ]
        },
    )

    from_: str = Field(alias="from", description="The old number: it holds nothing now.")
    to: str
    moved: MovedCounts
    merged: bool = Field(description="Whether the new number had memory already.")


class OptOutOut(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"opted_out_at": "2026-03-01T09:00:00.000Z", "policy": "keep"}]
        }
    )

    opted_out_at: str
    policy: Literal["keep", "forget"] = Field(
        description="keep: the memory stays and the opt-out is recorded; forget: the person was"
        " forgotten as by DELETE (nothing of theirs is kept, not even the opt-out)."
    )


# -- keys ---------------------------------------------------------------------------------------


class KeyCreate(Strict):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"scope": "agent:support-bot"}, {"scope": "staff", "agents": ["a", "b"]}]
        },
    )

    scope: str = Field(description="'admin', 'staff' or 'agent:<agent>'.", max_length=80)
    agents: list[AgentName] | None = Field(
        None, max_length=1000, description="For staff keys: the agents it may read (none: all)."
    )


class KeyCreated(BaseModel):
    id: str
    key: str = Field(description="The secret; shown once, never stored in clear.")
    scope: str
    agents: list[str]


class KeyOut(BaseModel):
    id: str
    scope: str
    agents: list[str]
    created_at: str
    revoked_at: str | None


class KeyList(BaseModel):
    items: list[KeyOut]


class KeyRevoked(BaseModel):
    id: str
    revoked: bool
    already_revoked: bool = Field(False, description="It was revoked before this call.")


# -- operations ---------------------------------------------------------------------------------


class UpgradeOut(BaseModel):
    """A model upgrade of the data folder started at this start-up (server/upgrade.py)."""

    state: Literal["building", "done", "failed"]
    source_model: str = Field(description="The model answering while the new table is built.")
    target_model: str
    source_table: str = Field(description="The table answering (the model's, or an older version).")
    target_table: str
    done: int = Field(description="Items written to the new table so far.")
    total: int
    seconds: float
    error: str | None = None


class ConnectionsOut(BaseModel):
    """The process's read connections to the database (one writer and the leases' come
    on top)."""

    engine: str = Field(description="sqlite or postgresql.")
    size: int = Field(description="The most that may be open (MEMORY_DB_POOL_SIZE).")
    open: int
    in_use: int
    idle: int
    waiting: int = Field(description="Requests waiting for a free one.")


class Health(BaseModel):
    status: str = Field(
        description="ok; degraded while a background loop keeps failing (see problems)."
    )
    problems: list[str] = Field(
        default_factory=list, description="What keeps failing, while status is degraded."
    )
    index_lag: int
    model: str
    version: str
    indexer: Literal["active", "standby"] = Field(
        "active",
        description="active: this replica runs the indexer; standby: another replica does"
        " (one at a time holds the lease; a standby takes over when the holder dies).",
    )
    erasure_pending: bool = Field(
        False,
        description="A forget is not finished: one is under way, one that a stop cut short"
        " waits for the next start-up to finish it, or (SQLite) its WAL checkpoint is held off"
        " by a reader (a backup, a sqlite3 shell) and is being retried. Until then files may"
        " still hold forgotten text.",
    )
    move_pending: bool = Field(
        False,
        description="A person's move to a new number is not settled: its vectors are being"
        " rewritten, or a stop or a failed write cut it short and a start-up (or the indexer,"
        " a minute on) finishes it. Until then files may still hold the old number.",
    )
    upgrade: UpgradeOut | None = Field(
        None, description="The data folder's move to the configured model, when one runs."
    )
    connections: ConnectionsOut | None = Field(
        None, description="The database connections of this process's read pool."
    )


# -- agent settings and compaction ----------------------------------------------------------


# The kinds of secret server/redaction.py knows (tests/server/test_redaction.py checks that the
# two lists agree; the client imports this module and needs none of the redaction code).
RedactKind = Literal["password", "card", "cvv", "iban", "national_id", "code", "email", "address"]
REDACT_KINDS: tuple[str, ...] = get_args(RedactKind)


class AgentSettingsIn(Strict):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"review": True, "threshold": 0.5, "excerpt_k": 8}]},
    )

    review: bool | None = Field(None, description="New extracted memories start pending.")
    threshold: float | None = Field(None, ge=-1.0, le=1.0, description="Cosine floor for facts.")
    top_k: int | None = Field(None, ge=0, le=200, description="Facts per context.")
    excerpt_k: int | None = Field(
        None, ge=0, le=200, description="Most hits among archived turns per context."
    )
    excerpt_budget_chars: int | None = Field(
        None,
        ge=0,
        le=1_000_000,
        strict=True,
        description="Characters of excerpts per context (windows around the hits).",
    )
    excerpt_threshold: float | None = Field(
        None, ge=-1.0, le=1.0, description="Cosine floor for semantic excerpts."
    )
    excerpt_mode: Literal["semantic", "keyword", "hybrid"] | None = None
    compact_trigger: int | None = Field(None, ge=1, le=100_000)
    compact_keep: int | None = Field(None, ge=0, le=100_000)
    opt_out_policy: Literal["keep", "forget"] | None = Field(
        None, description="What an opt-out (STOP) does: keep the memory, or forget the person."
    )
    retention_days: int | None = Field(
        None,
        ge=1,
        le=100_000,
        strict=True,  # true, 1.0 or "30" is a mistake, not a retention of one or 30 days
        description="Forget people whose newest turn is older than this many days; null: keep"
        " forever (an explicit null clears a previous value).",
    )
    redact: Literal["off", "default"] | list[RedactKind | Literal["default"]] | None = Field(
        None,
        max_length=len(REDACT_KINDS) + 1,
        description='Secrets redacted before storage: "default" (cards, CVVs, one-time codes,'
        ' IBANs, national ids, passwords), "off", or a list of kinds ("default" in it'
        ' stands for the default set; "email" and "address" are optional). Changing it'
        " never un-redacts what is stored.",
    )


def _settings_example(schema: dict[str, Any]) -> None:
    """An agent's settings as a fresh agent gets them, with a retention: the defaults come
    from Settings and the default model's calibration, not written here a second time. (Read
    when the schema is built: the client imports this module, and needs neither.)"""
    from embeddings.calibration import calibration_for
    from server.config import DEFAULT_MODEL, Settings
    from server.redaction import DEFAULT_KINDS as DEFAULT_REDACT_KINDS

    server = {name: field.default for name, field in Settings.model_fields.items()}
    example = {
        "agent": "support-bot",
        "review": False,
        "threshold": server["similarity_threshold"],
        "top_k": server["top_k"],
        "excerpt_k": server["excerpt_k"],
        "excerpt_budget_chars": server["excerpt_budget_chars"],
        "excerpt_threshold": calibration_for(DEFAULT_MODEL).excerpt_threshold,
        "excerpt_mode": server["excerpt_mode"],
        "compact_trigger": server["compact_trigger"],
        "compact_keep": server["compact_keep"],
        "opt_out_policy": "keep",
        "retention_days": 365,
        "redact": sorted(DEFAULT_REDACT_KINDS),
    }
    schema["examples"] = [example]


class AgentSettingsOut(BaseModel):
    model_config = ConfigDict(json_schema_extra=_settings_example)

    agent: str
    review: bool
    threshold: float
    top_k: int
    excerpt_k: int
    excerpt_budget_chars: int
    excerpt_threshold: float
    excerpt_mode: str
    compact_trigger: int
    compact_keep: int
    opt_out_policy: Literal["keep", "forget"] = "keep"
    retention_days: int | None = Field(
        None, description="Days a quiet person's data is kept; null: forever."
    )
    redact: list[str] = Field(
        default_factory=list,
        description="The kinds of secret redacted before storage; empty when off.",
    )


class CompactOut(BaseModel):
    archived: int
    facts_added: int
    summary_through_id: int | None


# -- memories -----------------------------------------------------------------------------------


class MemoryCreate(Strict):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "content": "Maya has a dog called Biscuit",
                    "phone": "+15551234567",
                    "type": "fact",
                }
            ]
        },
    )

    content: str = Field(description="One short datum, 1 to 2,000 characters.")
    phone: str | None = Field(
        None, max_length=PHONE_CHARS, description="The person it is about (E.164), or none."
    )
    type: Literal["fact", "preference", "context"] = "fact"
    confidence: float | None = Field(None, ge=0.0, le=1.0)
    metadata: dict[str, Any] = Field(
        default_factory=dict,
        description="Any JSON object, at most MEMORY_MAX_METADATA_BYTES (16 KiB) as compact"
        " JSON (413 metadata_too_large) and MEMORY_MAX_METADATA_DEPTH (10) levels deep (422"
        " metadata_too_deep). Its keys and values (numbers too) are redacted as the content.",
    )
    session_id: str | None = Field(
        None,
        min_length=1,
        max_length=SCOPE_ID_CHARS,
        description="Redacted as the content; a filter by the id as sent finds it.",
    )
    task_id: str | None = Field(
        None, min_length=1, max_length=SCOPE_ID_CHARS, description="As session_id."
    )
    graph_id: str | None = Field(
        None, min_length=1, max_length=SCOPE_ID_CHARS, description="As session_id."
    )
    supersedes: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9_-]+$",
        description="The id of a current memory of the same person that this one replaces (a"
        " change in the world: 'moved to Lisbon' replaces 'lives in Madrid'). The old one gets"
        " `invalid_at` and `superseded_by` in the same transaction; while this one waits for"
        " review, on approval. 422 invalid_supersedes when no such memory of this agent and"
        " person exists, 409 already_superseded when another replaced it already, 409"
        " supersedes_cycle when the memory it names replaces this one (or would once"
        " approved). Approved after another replaced the old one, it replaces the current one"
        " of that chain. To fix a wrong memory instead, PATCH it.",
    )

    @field_validator("session_id", "task_id", "graph_id")
    @classmethod
    def _printable_scope(cls, value: str | None, info: ValidationInfo) -> str | None:
        return None if value is None else printable_id(value, str(info.field_name))


class MemoryUpdate(Strict):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"content": "Maya has two dogs", "metadata": {"v": 2}}]},
    )

    content: str | None = Field(None, description="New content; re-embedded before the reply.")
    metadata: dict[str, Any] | None = Field(
        None, description="Replaces the metadata; limits as on POST."
    )
    type: Literal["fact", "preference", "context"] | None = None


class MemoryList(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"items": [_MEMORY_EXAMPLE], "total": 1, "as_of": 42}]}
    )

    items: list[MemoryOut]
    total: int
    as_of: int = Field(
        description="Pass back as `as_of` for the next pages: memories added later are left out,"
        " so offsets stay stable."
    )


class MemorySearch(Strict):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "query": "what pet does she have",
                    "phone": "+15551234567",
                    "limit": 5,
                    "threshold": 0.5,
                },
                {"query": "order 48213", "mode": "keyword", "metadata": {"channel": "web"}},
            ]
        },
    )

    query: str = Field(min_length=1, max_length=QUERY_CHARS)
    phone: str | None = Field(None, max_length=PHONE_CHARS)
    limit: int = Field(10, ge=1, le=100)
    threshold: float = Field(
        0.7, ge=-1.0, le=1.0, description="Floor on the relevance scale (semantic)."
    )
    mode: Literal["semantic", "keyword", "hybrid"] = "semantic"
    start_date: str | None = Field(None, max_length=TIME_CHARS)
    end_date: str | None = Field(None, max_length=TIME_CHARS)
    status: Literal["pending", "approved", "rejected"] | None = None
    type: Literal["fact", "preference", "context"] | None = None
    session_id: str | None = Field(None, max_length=SCOPE_ID_CHARS)
    task_id: str | None = Field(None, max_length=SCOPE_ID_CHARS)
    graph_id: str | None = Field(None, max_length=SCOPE_ID_CHARS)
    metadata: dict[str, Any] | None = Field(
        None, description="Equality on each key given; limits as for a memory's metadata."
    )
    as_of: str | None = Field(
        None,
        max_length=TIME_CHARS,
        description="An ISO 8601 time: the memories true then (superseded later or not)"
        " instead of the current ones.",
    )
    include_superseded: bool = Field(
        False, description="Also memories another one has replaced (the whole chain)."
    )


class ScoredMemoryOut(MemoryOut):
    model_config = ConfigDict(json_schema_extra={"examples": [{**_MEMORY_EXAMPLE, "score": 0.74}]})

    score: float = Field(description=SCORE_HELP)
    cosine: float | None = Field(None, description=COSINE_HELP)


class MemorySearchOut(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"items": [{**_MEMORY_EXAMPLE, "score": 0.74}]}]}
    )

    items: list[ScoredMemoryOut]


class MemoryDeleted(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"deleted": True}]})

    deleted: bool


class MemoriesCleared(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"deleted": 12}]})

    deleted: int


class EmbeddingOut(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "success": True,
                    "message": "Embedding regenerated",
                    "embedding": [0.0132, -0.0871],
                }
            ]
        }
    )

    success: bool
    message: str
    embedding: list[float] | None = None


class MemoryHistoryOut(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"items": [_HISTORY_EXAMPLE]}]})

    items: list[HistoryOut]


# -- staff search and audit ---------------------------------------------------------------------


class StaffSearchIn(Strict):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"query": "customer who wanted a refund for a blue jacket", "mode": "hybrid"},
                {
                    "query": "48213",
                    "mode": "keyword",
                    "kinds": ["turns"],
                    "since": "2026-01-01T00:00:00Z",
                },
            ]
        },
    )

    query: str = Field(min_length=1, max_length=QUERY_CHARS)
    agents: list[AgentName] | None = Field(None, max_length=200)
    phone: str | None = Field(None, max_length=PHONE_CHARS)
    kinds: list[Literal["facts", "turns", "summaries"]] | None = Field(
        None, min_length=1, max_length=3
    )
    mode: Literal["semantic", "keyword", "hybrid"] = "hybrid"
    since: str | None = Field(None, max_length=TIME_CHARS)
    until: str | None = Field(None, max_length=TIME_CHARS)
    limit: int = Field(20, ge=1, le=200)
    offset: int = Field(0, ge=0, le=10_000)
    threshold: float | None = Field(
        None,
        ge=-1.0,
        le=1.0,
        description="Show results of at least this relevance (the relevance scale, as"
        " min_relevance; a model with no fitted scale: a floor on the raw score).",
    )
    min_relevance: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description="Show results of at least this relevance (0 shows all). Unset: the "
        "model's floor (0.01 for the bundled models: only what scores as filler is hidden),"
        " which never hides a result holding every word of the query.",
    )


class StaffHit(BaseModel):
    kind: str = Field(description="facts, turns or summaries")
    agent: str
    phone: str | None = Field(description="null for a memory about no one person")
    id: str
    text: str
    score: float
    created_at: str
    status: str = Field(
        description="facts: pending/approved/rejected, or superseded (a newer memory replaced"
        " it: see the memory's invalid_at and superseded_by); turns: recent/archived"
    )
    highlights: list[tuple[int, int]] = Field(
        description="[start, end) character spans of the query's words in the text."
    )
    relevance: float = Field(
        description="On the relevance scale (0.7 means relevant to the question, as facts in"
        " the context), from the result's own stored vector, the same in every mode; a result"
        " that says every word of the query is at least 0.75 (strong). The order is the mode's"
        " (in semantic mode `score` is this scale's too). A model with no fitted scale: 0"
        " (what filler scores) to 1 (what an answer typically scores) for the mode in use."
    )
    match: Literal["strong", "good", "weak"] = Field(
        description="the relevance in words (strong from 0.75, good from 0.4); a turn of a few"
        " words (a greeting, 'ok') is never strong"
    )
    cosine: float | None = Field(
        None, description="The raw cosine of the result's stored vector to the query."
    )
    replaced_by: str | None = Field(
        None,
        description="A superseded fact: the current fact of its chain, which is listed right"
        " above it and carries the best relevance of the chain.",
    )


class StaffSearchOut(BaseModel):
    items: list[StaffHit]
    next_offset: int | None
    floor: float = Field(description="the relevance a result needed to be shown")
    hidden: int = Field(
        description="results found but below the floor (ask again with min_relevance 0)"
    )


class AuditOut(BaseModel):
    id: int
    at: str
    key_id: str
    query: str
    filters: dict[str, Any]
    result_count: int
    results: list[list[str]]


class AuditList(BaseModel):
    items: list[AuditOut]
    next_before_id: int | None
