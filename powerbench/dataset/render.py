"""Records (conversations, instructions, plain text) rendered to plain-text documents."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

# ShareGPT speaker tags -> rendered role names; other tags are title-cased.
ROLE_NAMES = {
    "human": "User", "user": "User",
    "gpt": "Assistant", "chatgpt": "Assistant", "bard": "Assistant", "bing": "Assistant",
    "assistant": "Assistant", "model": "Assistant",
    "system": "System",
}


def role_name(tag: str) -> str:
    return ROLE_NAMES.get(tag.lower(), tag.strip().title() or "User")


def render_chat(turns: Iterable[Mapping[str, Any]]) -> str:
    """ShareGPT / OpenAI-style turns -> "User: ...\\nAssistant: ..." (empty turns dropped)."""
    lines = []
    for turn in turns:
        speaker = turn.get("from", turn.get("role", "user"))
        value = turn.get("value", turn.get("content", ""))
        if isinstance(value, str) and value.strip():
            lines.append(f"{role_name(str(speaker))}: {value.strip()}")
    return "\n".join(lines)


def render_instruction(record: Mapping[str, Any]) -> str:
    """Alpaca-style {instruction, input, output} as a two-turn conversation."""
    prompt = "\n\n".join(str(record.get(k) or "").strip() for k in ("instruction", "input"))
    turns = [{"from": "human", "value": prompt.strip()},
             {"from": "gpt", "value": str(record.get("output") or "")}]
    return render_chat(turns)


def _conversation_turns(record: Mapping[str, Any]) -> Any:
    return record.get("conversations", record.get("messages"))


# The first matching key decides how a record is rendered.
_RECORD_RENDERERS: tuple[tuple[str, Callable[[Mapping[str, Any]], str]], ...] = (
    ("conversations", lambda r: render_chat(_conversation_turns(r))),
    ("messages", lambda r: render_chat(_conversation_turns(r))),
    ("instruction", render_instruction),
)


def render_record(record: Any, text_field: str = "text") -> str:
    """A JSON record as text: conversation, instruction triple, `text_field`, or a string."""
    if isinstance(record, str):
        return record
    if not isinstance(record, Mapping):
        raise ValueError(f"cannot render a {type(record).__name__} record as text")
    for key, render in _RECORD_RENDERERS:
        if key in record:
            return render(record)
    if text_field in record:
        return str(record[text_field] or "")
    raise ValueError(f"record has none of the keys conversations/messages/instruction/"
                     f"{text_field!r} (keys: {sorted(record)[:10]}); set dataset.text_field")
