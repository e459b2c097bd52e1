"""Every text column the server keeps (both database engines, and the vector tables) and why
it never holds a raw secret: redacted before it is written, or not free text at all.
tests/server/test_redaction_fields.py reads the live schemas: a text column missing here
fails it, so a new field cannot skip redaction unnoticed."""

from __future__ import annotations

# Why a column holds no raw secret. Free text a client or a model wrote is redacted with the
# agent's kinds (server/redaction.py) before it is stored; everything else is one of these.
REDACTED = "redacted free text"
COPY = "a copy of redacted text"
AGENT = "not free text: an agent's name (a-z 0-9 _ -, checked)"
PHONE = "not free text: a phone number in E.164 (parsed)"
TIME = "not free text: a time the server formats (ISO 8601)"
ENUM = "not free text: one of a fixed set of values"
SERVER_ID = "not free text: an id the server makes"
KEY_ID = "not free text: an API key's id, or a name of the server's own (system, model:...)"
HASH = "not free text: a hash of an API key"
JSON_OF_IDS = "not free text: JSON of ids, numbers or agents' names"
JSON_OF_SETTINGS = "not free text: JSON of checked settings (numbers, enums, kinds)"
JSON_OF_FILTERS = "not free text: JSON of a staff search's checked filters"

DATABASE_COLUMNS: dict[str, str] = {
    "messages.agent": AGENT,
    "messages.phone": PHONE,
    "messages.event_id": REDACTED + " (a retry is recognised by its redacted form)",
    "messages.number": PHONE,
    "messages.role": ENUM,
    "messages.content": REDACTED,
    "messages.created_at": TIME,
    "messages.stored_at": TIME,
    "summaries.agent": AGENT,
    "summaries.phone": PHONE,
    "summaries.text": REDACTED + " (the model's summary)",
    "summaries.updated_at": TIME,
    "memories.id": SERVER_ID,
    "memories.agent": AGENT,
    "memories.phone": PHONE,
    "memories.content": REDACTED,
    "memories.type": ENUM,
    "memories.status": ENUM,
    "memories.source": ENUM,
    "memories.metadata": REDACTED + " (JSON: keys, strings and numbers)",
    "memories.session_id": REDACTED,
    "memories.task_id": REDACTED,
    "memories.graph_id": REDACTED,
    "memories.source_turns": JSON_OF_IDS,
    "memories.created_at": TIME,
    "memories.updated_at": TIME,
    "memories.expires_at": TIME,
    "memories.valid_from": TIME,
    "memories.invalid_at": TIME,
    "memories.superseded_by": SERVER_ID,
    "memories.supersedes": SERVER_ID + " (a stored memory's, checked)",
    "memory_history.memory_id": SERVER_ID,
    "memory_history.agent": AGENT,
    "memory_history.phone": PHONE,
    "memory_history.action": ENUM,
    "memory_history.actor": KEY_ID,
    "memory_history.old_content": COPY + " (a memory's content)",
    "memory_history.new_content": COPY + " (a memory's content)",
    "memory_history.at": TIME,
    "keys.id": SERVER_ID,
    "keys.hash": HASH,
    "keys.scope": ENUM + " (admin, staff, agent:<agent>)",
    "keys.agents": JSON_OF_IDS,
    "keys.created_at": TIME,
    "keys.revoked_at": TIME,
    "agent_settings.agent": AGENT,
    "agent_settings.settings": JSON_OF_SETTINGS,
    "agent_settings.updated_at": TIME,
    "outbox.kind": ENUM,
    "outbox.ref_id": SERVER_ID,
    "outbox.agent": AGENT,
    "outbox.phone": PHONE,
    "outbox.enqueued_at": TIME,
    "meta.key": ENUM + " (the server's own keys)",
    "meta.value": "not free text: a model's or table's name, a count, a flag",
    "audit.at": TIME,
    "audit.key_id": KEY_ID,
    "audit.query": REDACTED + " (a staff search's query)",
    "audit.filters": JSON_OF_FILTERS,
    "audit.results": JSON_OF_IDS + " ([agent, phone] pairs)",
    "compaction_claims.agent": AGENT,
    "compaction_claims.phone": PHONE,
    "compaction_claims.holder": SERVER_ID + " (a process's)",
    "compaction_claims.until": TIME,
    "opt_outs.agent": AGENT,
    "opt_outs.phone": PHONE,
    "opt_outs.opted_out_at": TIME,
    "erasures.agent": AGENT,
    "erasures.phone": PHONE,
    "erasures.quiet_before": TIME,
    "erasures.requested_at": TIME,
    "people.agent": AGENT,
    "people.phone": PHONE,
    "people.name": REDACTED + " (the person's name, set or sent with a turn)",
    "people.updated_at": TIME,
    "person_name_words.word": COPY + " (a folded word of people.name as sent and redacted)",
    "person_name_words.agent": AGENT,
    "person_name_words.phone": PHONE,
    "moves.agent": AGENT,
    "moves.old_phone": PHONE,
    "moves.new_phone": PHONE,
    "moves.requested_at": TIME,
    "schema_migrations.applied_at": TIME,
}

# The vector tables' columns (embeddings/index.py), whatever the model and version.
VECTOR_COLUMNS: dict[str, str] = {
    "id": SERVER_ID,
    "kind": ENUM,
    "ref_id": SERVER_ID,
    "agent": AGENT,
    "phone": PHONE + " (or empty)",
    "status": ENUM,
    "type": ENUM,
    "created_at": TIME,
    "text": COPY + " (a turn with its neighbours, a memory's content, a summary)",
    "content": COPY + " (a turn's content)",
    "session_id": COPY + " (memories.session_id)",
    "task_id": COPY + " (memories.task_id)",
    "graph_id": COPY + " (memories.graph_id)",
}
