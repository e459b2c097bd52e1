r"""An agent loop on the memory server: for each incoming turn, store it, build the context, ask
an OpenAI-compatible model (chat completions) with the context's notes in the system message and
its history as the messages, store the reply as the agent's turn, print it.

Run with:

    export MEMORY_API_KEY=mk_...  OPENAI_API_KEY=sk-...
    echo '{"agent": "support-bot", "phone": "+15551234567", "text": "Hi!", "event_id": "e-1"}' \
      | .venv/bin/python scripts/example_agent.py

Each line of stdin is one incoming turn, as a messaging webhook would deliver it: a JSON object
{"agent", "phone", "text", "event_id"}. Each answer is one JSON line on stdout: {"agent",
"phone", "event_id", "reply"}. A turn whose event_id is already stored (the webhook's retry) is
not answered twice: "reply" is null and "duplicate" true. A turn that fails (a line that is not
such an object, an error of the server or of the model) prints {"error"} and the loop goes on;
the exit status is 1 if any turn failed.

Settings (environment): MEMORY_URL (default http://127.0.0.1:8080) and MEMORY_API_KEY (a key
of the agent, `agent:<agent>`); the model: MEMORY_LLM_BASE_URL (unset: OpenAI), MEMORY_LLM_API_KEY
or else OPENAI_API_KEY, MEMORY_LLM_MODEL (default gpt-4o-mini).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import openai
from openai.types.chat import ChatCompletionMessageParam

from server.client import MemoryClient, MemoryServerError
from server.schemas import ContextOut

INSTRUCTIONS = (
    "You are a friendly assistant chatting with one person on WhatsApp. Answer in one or two"
    " short sentences, in the person's language."
)


def model_from_environment() -> tuple[openai.OpenAI, str]:
    """The model client and model name from MEMORY_LLM_* (or OPENAI_API_KEY)."""
    key = os.environ.get("MEMORY_LLM_API_KEY") or os.environ.get("OPENAI_API_KEY")
    base_url = os.environ.get("MEMORY_LLM_BASE_URL") or None
    if not key and not base_url:
        sys.exit("example_agent: set OPENAI_API_KEY, or MEMORY_LLM_BASE_URL for a local model")
    # A local server may want no key; the openai package insists on one.
    model = openai.OpenAI(base_url=base_url, api_key=key or "unused", max_retries=2)
    return model, os.environ.get("MEMORY_LLM_MODEL") or "gpt-4o-mini"


def prompt(context: ContextOut) -> list[ChatCompletionMessageParam]:
    """The notes (facts, summary, days since) in the system message; the history as turns."""
    system = INSTRUCTIONS + ("\n\n" + context.notes if context.notes else "")
    messages: list[ChatCompletionMessageParam] = [{"role": "system", "content": system}]
    for turn in context.history:
        if turn.role == "user":
            messages.append({"role": "user", "content": turn.content})
        else:
            messages.append({"role": "assistant", "content": turn.content})
    return messages


def answer(
    memory: MemoryClient, model: openai.OpenAI, name: str, turn: dict[str, Any]
) -> str | None:
    """Store the person's turn, ask the model, store and return its reply (None: a retry)."""
    agent, phone, event_id = turn["agent"], turn["phone"], turn.get("event_id")
    stored = memory.remember(agent, phone, "user", turn["text"], event_id=event_id)
    if not stored.stored:
        return None  # the webhook's retry of a turn already answered
    context = memory.context(agent, phone)  # facts are matched against this newest turn
    completion = model.chat.completions.create(model=name, messages=prompt(context))
    reply = completion.choices[0].message.content or ""
    # With an event_id of its own the reply is stored once even if this call is retried.
    reply_id = f"{event_id}:reply" if event_id else None
    memory.remember(agent, phone, "assistant", reply, event_id=reply_id)
    return reply


def main() -> int:
    model, name = model_from_environment()
    failed = False
    with MemoryClient() as memory:
        for line in sys.stdin:
            if not line.strip():
                continue
            out: dict[str, Any] = {}
            try:
                turn = json.loads(line)
                out = {key: turn.get(key) for key in ("agent", "phone", "event_id")}
                reply = answer(memory, model, name, turn)
            except (ValueError, KeyError, AttributeError) as exc:
                failed = True
                out["error"] = f"not a turn ({exc!r}): {line.strip()[:200]}"
            except (MemoryServerError, openai.OpenAIError) as exc:
                failed = True
                out["error"] = str(exc)
            else:
                out.update(reply=reply, duplicate=reply is None)
            print(json.dumps(out, ensure_ascii=False), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
