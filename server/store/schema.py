"""The schema, as versioned migrations: SQLite's history, and the same versions for
PostgreSQL (which reaches the same tables without SQLite's table rebuilds)."""

from __future__ import annotations

# Each migration runs in its own transaction together with its record in schema_migrations.
SQLITE_MIGRATIONS: list[str] = [
    """
    CREATE TABLE messages (
        id INTEGER PRIMARY KEY,
        agent TEXT NOT NULL,
        phone TEXT NOT NULL,
        event_id TEXT,
        number TEXT,
        role TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
        content TEXT NOT NULL,
        created_at TEXT NOT NULL,
        stored_at TEXT NOT NULL,
        archived INTEGER NOT NULL DEFAULT 0
    );
    -- Idempotency per agent: one agent can never claim (and so drop) another agent's event ids.
    CREATE UNIQUE INDEX messages_event ON messages (agent, event_id) WHERE event_id IS NOT NULL;
    CREATE INDEX messages_person ON messages (agent, phone, id);
    CREATE INDEX messages_window ON messages (agent, phone, archived, id);

    CREATE TABLE summaries (
        agent TEXT NOT NULL,
        phone TEXT NOT NULL,
        text TEXT NOT NULL,
        through_id INTEGER,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (agent, phone)
    );

    CREATE TABLE memories (
        id TEXT PRIMARY KEY,
        agent TEXT NOT NULL,
        phone TEXT,
        content TEXT NOT NULL,
        type TEXT NOT NULL CHECK (type IN ('fact', 'preference', 'context')),
        status TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'rejected')),
        confidence REAL,
        source TEXT NOT NULL CHECK (source IN ('manual', 'extracted')),
        metadata TEXT NOT NULL DEFAULT '{}',
        session_id TEXT,
        task_id TEXT,
        graph_id TEXT,
        source_turns TEXT NOT NULL DEFAULT '[]',
        seen_count INTEGER NOT NULL DEFAULT 1,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        expires_at TEXT
    );
    CREATE INDEX memories_person ON memories (agent, phone, status, created_at);
    CREATE INDEX memories_agent ON memories (agent, created_at);

    CREATE TABLE memory_history (
        id INTEGER PRIMARY KEY,
        memory_id TEXT NOT NULL,
        agent TEXT NOT NULL,
        phone TEXT,
        action TEXT NOT NULL,
        actor TEXT NOT NULL,
        old_content TEXT,
        new_content TEXT,
        at TEXT NOT NULL
    );
    CREATE INDEX memory_history_memory ON memory_history (memory_id, id);
    CREATE INDEX memory_history_person ON memory_history (agent, phone);

    CREATE TABLE keys (
        id TEXT PRIMARY KEY,
        hash TEXT NOT NULL UNIQUE,
        scope TEXT NOT NULL,
        agents TEXT NOT NULL DEFAULT '[]',
        created_at TEXT NOT NULL,
        revoked_at TEXT
    );

    CREATE TABLE agent_settings (
        agent TEXT PRIMARY KEY,
        settings TEXT NOT NULL,
        updated_at TEXT NOT NULL
    );

    -- Work for the vector indexer: which row (kind, ref_id) must be (re)embedded or removed.
    CREATE TABLE outbox (
        id INTEGER PRIMARY KEY,
        kind TEXT NOT NULL,
        ref_id TEXT NOT NULL,
        agent TEXT NOT NULL,
        phone TEXT,
        enqueued_at TEXT NOT NULL
    );
    """,
    """
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    """,
    """
    -- Who searched what across people: staff searches, readable by admins.
    CREATE TABLE audit (
        id INTEGER PRIMARY KEY,
        at TEXT NOT NULL,
        key_id TEXT NOT NULL,
        query TEXT NOT NULL,
        filters TEXT NOT NULL,
        result_count INTEGER NOT NULL,
        results TEXT NOT NULL
    );
    CREATE INDEX audit_at ON audit (id);
    """,
    # Ids are never reused (AUTOINCREMENT): without it SQLite hands out the highest deleted id
    # again, so after a forget a new turn could take a forgotten person's message id, and the
    # indexer acknowledging a batch by outbox id deleted the new rows' entries. SQLite cannot
    # add AUTOINCREMENT to a table: each is rebuilt, ids kept, and the sequence starts above
    # the highest id in use.
    """
    CREATE TABLE messages_v4 (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        agent TEXT NOT NULL,
        phone TEXT NOT NULL,
        event_id TEXT,
        number TEXT,
        role TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
        content TEXT NOT NULL,
        created_at TEXT NOT NULL,
        stored_at TEXT NOT NULL,
        archived INTEGER NOT NULL DEFAULT 0
    );
    INSERT INTO messages_v4 (id, agent, phone, event_id, number, role, content, created_at,
        stored_at, archived)
        SELECT id, agent, phone, event_id, number, role, content, created_at, stored_at, archived
        FROM messages;
    DROP TABLE messages;
    ALTER TABLE messages_v4 RENAME TO messages;
    CREATE UNIQUE INDEX messages_event ON messages (agent, event_id) WHERE event_id IS NOT NULL;
    CREATE INDEX messages_person ON messages (agent, phone, id);
    CREATE INDEX messages_window ON messages (agent, phone, archived, id);
    -- Whether a phone is known to any agent (the audit of a staff search by phone).
    CREATE INDEX messages_phone ON messages (phone);
    -- Above any turn id still referenced, not only the highest one stored.
    INSERT INTO sqlite_sequence (name, seq) SELECT 'messages', 0
        WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'messages');
    UPDATE sqlite_sequence SET seq = MAX(seq,
        COALESCE((SELECT MAX(CAST(ref_id AS INTEGER)) FROM outbox WHERE kind = 'turn'), 0),
        COALESCE((SELECT MAX(through_id) FROM summaries), 0))
        WHERE name = 'messages';

    CREATE TABLE memory_history_v4 (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        memory_id TEXT NOT NULL,
        agent TEXT NOT NULL,
        phone TEXT,
        action TEXT NOT NULL,
        actor TEXT NOT NULL,
        old_content TEXT,
        new_content TEXT,
        at TEXT NOT NULL
    );
    INSERT INTO memory_history_v4 (id, memory_id, agent, phone, action, actor, old_content,
        new_content, at)
        SELECT id, memory_id, agent, phone, action, actor, old_content, new_content, at
        FROM memory_history;
    DROP TABLE memory_history;
    ALTER TABLE memory_history_v4 RENAME TO memory_history;
    CREATE INDEX memory_history_memory ON memory_history (memory_id, id);
    CREATE INDEX memory_history_person ON memory_history (agent, phone);

    CREATE TABLE outbox_v4 (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        kind TEXT NOT NULL,
        ref_id TEXT NOT NULL,
        agent TEXT NOT NULL,
        phone TEXT,
        enqueued_at TEXT NOT NULL
    );
    INSERT INTO outbox_v4 (id, kind, ref_id, agent, phone, enqueued_at)
        SELECT id, kind, ref_id, agent, phone, enqueued_at FROM outbox;
    DROP TABLE outbox;
    ALTER TABLE outbox_v4 RENAME TO outbox;
    CREATE INDEX outbox_person ON outbox (agent, phone);

    CREATE TABLE audit_v4 (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        at TEXT NOT NULL,
        key_id TEXT NOT NULL,
        query TEXT NOT NULL,
        filters TEXT NOT NULL,
        result_count INTEGER NOT NULL,
        results TEXT NOT NULL
    );
    INSERT INTO audit_v4 (id, at, key_id, query, filters, result_count, results)
        SELECT id, at, key_id, query, filters, result_count, results FROM audit;
    DROP TABLE audit;
    ALTER TABLE audit_v4 RENAME TO audit;
    """,
    """
    -- Who compacts a person now: a replica claims them until a time (a crashed replica's
    -- claim runs out), so two replicas never call the model for one person at once.
    CREATE TABLE compaction_claims (
        agent TEXT NOT NULL,
        phone TEXT NOT NULL,
        holder TEXT NOT NULL,
        until TEXT NOT NULL,
        PRIMARY KEY (agent, phone)
    );
    """,
    """
    -- People who opted out (STOP), until their next user turn; a forget deletes the row.
    CREATE TABLE opt_outs (
        agent TEXT NOT NULL,
        phone TEXT NOT NULL,
        opted_out_at TEXT NOT NULL,
        PRIMARY KEY (agent, phone)
    );
    -- The retention sweep's archived turns older than a time, per agent, without a scan.
    CREATE INDEX messages_archived_age ON messages (agent, archived, created_at);
    """,
    """
    -- Forgets under way: journaled before the first row goes and removed once no file holds
    -- the person, so one that a crash cut short is finished at the next start-up.
    CREATE TABLE erasures (
        agent TEXT NOT NULL,
        phone TEXT NOT NULL,
        quiet_before TEXT,
        requested_at TEXT NOT NULL,
        rows_erased INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (agent, phone)
    );
    -- Turns dated before the year 1000 were stored with fewer than four year digits
    -- ('999-06-01T...'), which sort after every later time: padded to four.
    UPDATE messages SET created_at = substr('000' || created_at, length(created_at) - 20)
    WHERE length(created_at) < 24;
    """,    """
    -- Facts that stay true (issue 26): when a memory became true, when it stopped being true
    -- (null while current) and the memory that replaced it. Older memories became true when
    -- they were stored.
    ALTER TABLE memories ADD COLUMN valid_from TEXT;
    ALTER TABLE memories ADD COLUMN invalid_at TEXT;
    ALTER TABLE memories ADD COLUMN superseded_by TEXT;
    -- A pending memory's proposal: the memory it replaces once approved.
    ALTER TABLE memories ADD COLUMN supersedes TEXT;
    UPDATE memories SET valid_from = created_at;
    CREATE INDEX memories_superseded_by ON memories (superseded_by);
    """,
    """
    -- The person's name as the agent knows it (issue 25): shown in the context, left out of
    -- the excerpts' search (the turns that say it are greetings), and how staff search finds
    -- whom a question names. Each folded word of it in person_name_words, for that lookup.
    CREATE TABLE people (
        agent TEXT NOT NULL,
        phone TEXT NOT NULL,
        name TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (agent, phone)
    );
    CREATE TABLE person_name_words (
        word TEXT NOT NULL,
        agent TEXT NOT NULL,
        phone TEXT NOT NULL,
        PRIMARY KEY (word, agent, phone)
    );
    CREATE INDEX person_name_words_person ON person_name_words (agent, phone);
    """,    """
    -- Moves under way (issue 39): written in the move's own transaction and removed once no
    -- row of any vector table, and no older version of one, holds the old number, so a move
    -- that a crash cut short is finished at the next start-up (as a forget's journal is).
    CREATE TABLE moves (
        agent TEXT NOT NULL,
        old_phone TEXT NOT NULL,
        new_phone TEXT NOT NULL,
        requested_at TEXT NOT NULL,
        PRIMARY KEY (agent, old_phone, new_phone)
    );
    """,
]

# The same versions. Ids come from identity columns, which PostgreSQL never hands out
# twice (what SQLite needed AUTOINCREMENT and version 4's rebuild for); memories get `seq`,
# their insertion order, which SQLite keeps in rowid.
POSTGRES_MIGRATIONS: list[str] = [
    """
    CREATE TABLE messages (
        id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
        agent TEXT NOT NULL,
        phone TEXT NOT NULL,
        event_id TEXT,
        number TEXT,
        role TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
        content TEXT NOT NULL,
        created_at TEXT NOT NULL,
        stored_at TEXT NOT NULL,
        archived INTEGER NOT NULL DEFAULT 0
    );
    CREATE UNIQUE INDEX messages_event ON messages (agent, event_id) WHERE event_id IS NOT NULL;
    CREATE INDEX messages_person ON messages (agent, phone, id);
    CREATE INDEX messages_window ON messages (agent, phone, archived, id);

    CREATE TABLE summaries (
        agent TEXT NOT NULL,
        phone TEXT NOT NULL,
        text TEXT NOT NULL,
        through_id BIGINT,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (agent, phone)
    );

    CREATE TABLE memories (
        id TEXT PRIMARY KEY,
        seq BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
        agent TEXT NOT NULL,
        phone TEXT,
        content TEXT NOT NULL,
        type TEXT NOT NULL CHECK (type IN ('fact', 'preference', 'context')),
        status TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'rejected')),
        confidence DOUBLE PRECISION,
        source TEXT NOT NULL CHECK (source IN ('manual', 'extracted')),
        metadata TEXT NOT NULL DEFAULT '{}',
        session_id TEXT,
        task_id TEXT,
        graph_id TEXT,
        source_turns TEXT NOT NULL DEFAULT '[]',
        seen_count INTEGER NOT NULL DEFAULT 1,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        expires_at TEXT
    );
    CREATE INDEX memories_person ON memories (agent, phone, status, created_at);
    CREATE INDEX memories_agent ON memories (agent, created_at);

    CREATE TABLE memory_history (
        id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
        memory_id TEXT NOT NULL,
        agent TEXT NOT NULL,
        phone TEXT,
        action TEXT NOT NULL,
        actor TEXT NOT NULL,
        old_content TEXT,
        new_content TEXT,
        at TEXT NOT NULL
    );
    CREATE INDEX memory_history_memory ON memory_history (memory_id, id);
    CREATE INDEX memory_history_person ON memory_history (agent, phone);

    CREATE TABLE keys (
        id TEXT PRIMARY KEY,
        hash TEXT NOT NULL UNIQUE,
        scope TEXT NOT NULL,
        agents TEXT NOT NULL DEFAULT '[]',
        created_at TEXT NOT NULL,
        revoked_at TEXT
    );

    CREATE TABLE agent_settings (
        agent TEXT PRIMARY KEY,
        settings TEXT NOT NULL,
        updated_at TEXT NOT NULL
    );

    CREATE TABLE outbox (
        id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
        kind TEXT NOT NULL,
        ref_id TEXT NOT NULL,
        agent TEXT NOT NULL,
        phone TEXT,
        enqueued_at TEXT NOT NULL
    );
    """,
    """
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    """,
    """
    CREATE TABLE audit (
        id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
        at TEXT NOT NULL,
        key_id TEXT NOT NULL,
        query TEXT NOT NULL,
        filters TEXT NOT NULL,
        result_count INTEGER NOT NULL,
        results TEXT NOT NULL
    );
    CREATE INDEX audit_at ON audit (id);
    """,
    """
    CREATE INDEX messages_phone ON messages (phone);
    CREATE INDEX outbox_person ON outbox (agent, phone);
    """,
    """
    -- Who compacts a person now: a replica claims them until a time (a crashed replica's
    -- claim runs out), so two replicas never call the model for one person at once.
    CREATE TABLE compaction_claims (
        agent TEXT NOT NULL,
        phone TEXT NOT NULL,
        holder TEXT NOT NULL,
        until TEXT NOT NULL,
        PRIMARY KEY (agent, phone)
    );
    """,
    """
    -- People who opted out (STOP), until their next user turn; a forget deletes the row.
    CREATE TABLE opt_outs (
        agent TEXT NOT NULL,
        phone TEXT NOT NULL,
        opted_out_at TEXT NOT NULL,
        PRIMARY KEY (agent, phone)
    );
    -- The retention sweep's archived turns older than a time, per agent, without a scan.
    CREATE INDEX messages_archived_age ON messages (agent, archived, created_at);
    """,
    """
    -- Forgets under way: journaled before the first row goes and removed once no file holds
    -- the person, so one that a crash cut short is finished at the next start-up.
    CREATE TABLE erasures (
        agent TEXT NOT NULL,
        phone TEXT NOT NULL,
        quiet_before TEXT,
        requested_at TEXT NOT NULL,
        rows_erased INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (agent, phone)
    );
    -- Turns dated before the year 1000 were stored with fewer than four year digits
    -- ('999-06-01T...'), which sort after every later time: padded to four.
    UPDATE messages SET created_at = substr('000' || created_at, length(created_at) - 20)
    WHERE length(created_at) < 24;
    """,    """
    -- Facts that stay true (issue 26): when a memory became true, when it stopped being true
    -- (null while current) and the memory that replaced it. Older memories became true when
    -- they were stored.
    ALTER TABLE memories ADD COLUMN valid_from TEXT;
    ALTER TABLE memories ADD COLUMN invalid_at TEXT;
    ALTER TABLE memories ADD COLUMN superseded_by TEXT;
    -- A pending memory's proposal: the memory it replaces once approved.
    ALTER TABLE memories ADD COLUMN supersedes TEXT;
    UPDATE memories SET valid_from = created_at;
    CREATE INDEX memories_superseded_by ON memories (superseded_by);
    """,
    """
    -- The person's name as the agent knows it (issue 25): shown in the context, left out of
    -- the excerpts' search (the turns that say it are greetings), and how staff search finds
    -- whom a question names. Each folded word of it in person_name_words, for that lookup.
    CREATE TABLE people (
        agent TEXT NOT NULL,
        phone TEXT NOT NULL,
        name TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (agent, phone)
    );
    CREATE TABLE person_name_words (
        word TEXT NOT NULL,
        agent TEXT NOT NULL,
        phone TEXT NOT NULL,
        PRIMARY KEY (word, agent, phone)
    );
    CREATE INDEX person_name_words_person ON person_name_words (agent, phone);
    """,    """
    -- Moves under way (issue 39): written in the move's own transaction and removed once no
    -- row of any vector table, and no older version of one, holds the old number, so a move
    -- that a crash cut short is finished at the next start-up (as a forget's journal is).
    CREATE TABLE moves (
        agent TEXT NOT NULL,
        old_phone TEXT NOT NULL,
        new_phone TEXT NOT NULL,
        requested_at TEXT NOT NULL,
        PRIMARY KEY (agent, old_phone, new_phone)
    );
    """,
]
