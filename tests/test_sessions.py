"""Session transcripts: parsing, masking, line maps, file listing, delta thresholds, history converters."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import pytest

from clawmem_core.sessions import (
    SessionDeltaTracker,
    chat_store_to_jsonl,
    list_session_files,
    mask_secrets,
    message_to_record,
    messages_to_jsonl,
    parse_transcript,
    read_session_file,
    remap_lines,
    session_display_path,
    session_hash,
    write_session_file,
)


def _msg(role: str, content: Any) -> str:
    return json.dumps({"type": "message", "message": {"role": role, "content": content}})


# ---------------------------------------------------------------------------------------------------- parsing


def test_line_map_tracks_jsonl_lines_with_metadata_interleaved() -> None:
    lines = [
        json.dumps({"type": "custom", "customType": "model-snapshot", "data": {}}),
        json.dumps({"type": "custom", "customType": "openclaw.cache-ttl", "data": {}}),
        json.dumps({"type": "session-meta", "agentId": "test"}),
        _msg("user", "Hello world"),
        json.dumps({"type": "custom", "customType": "tool-result", "data": {}}),
        _msg("assistant", "Hi there, how can I help?"),
        _msg("user", "Tell me a joke"),
    ]
    entry = parse_transcript("\n".join(lines))
    assert entry.content.split("\n") == [
        "User: Hello world",
        "Assistant: Hi there, how can I help?",
        "User: Tell me a joke",
    ]
    assert entry.line_map == (4, 6, 7)
    assert entry.message_count == 3


def test_no_messages_gives_empty_content_and_map() -> None:
    text = "\n".join(
        [
            json.dumps({"type": "custom", "customType": "model-snapshot", "data": {}}),
            json.dumps({"type": "session-meta", "agentId": "test"}),
        ]
    )
    entry = parse_transcript(text)
    assert entry.content == ""
    assert entry.line_map == ()


def test_blank_and_invalid_lines_are_skipped() -> None:
    text = "\n".join(["", "not valid json", _msg("user", "First"), "", _msg("assistant", "Second")])
    entry = parse_transcript(text)
    assert entry.line_map == (3, 5)
    assert entry.content == "User: First\nAssistant: Second"


def test_only_user_and_assistant_text_blocks_are_kept() -> None:
    text = "\n".join(
        [
            _msg("system", "You are helpful"),
            _msg("toolResult", "ls output"),
            _msg("user", [{"type": "text", "text": "look at\n\n  this"}, {"type": "image", "data": "..."}]),
            _msg("assistant", [{"type": "toolCall", "name": "x"}]),  # no text: skipped
            _msg("assistant", [{"type": "text", "text": "one"}, {"type": "text", "text": "  two\tthree "}]),
            json.dumps({"type": "message"}),  # no message object
            json.dumps({"type": "message", "message": {"role": 7, "content": "bad role"}}),
            json.dumps(["not", "an", "object"]),
            _msg("user", "   "),  # whitespace only: skipped
        ]
    )
    entry = parse_transcript(text)
    assert entry.content == "User: look at this\nAssistant: one two three"
    assert entry.line_map == (3, 5)


def test_crlf_lines_and_read_session_file(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(("\r\n".join([_msg("user", "a"), _msg("assistant", "b")]) + "\r\n").encode())
    entry = read_session_file(path)
    assert entry.content == "User: a\nAssistant: b"
    assert entry.line_map == (1, 2)


def test_transcript_secrets_are_masked_and_stay_on_one_line() -> None:
    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\nabcdef\n-----END RSA PRIVATE KEY-----"
    text = "\n".join(
        [
            _msg("user", "my key is sk-proj-ABCDEFGHIJKLMNOPQRSTUVWX1234 ok"),
            _msg("assistant", f"here:\n{pem}\nthanks"),
        ]
    )
    entry = parse_transcript(text)
    lines = entry.content.split("\n")
    assert len(lines) == 2 == len(entry.line_map)
    assert "ABCDEFGHIJKLMNOPQRSTUVWX" not in entry.content
    assert "sk-proj-*** ok" in lines[0]
    assert "MIIEowIBAAKCAQEA" not in entry.content
    assert lines[1] == "Assistant: here: *** thanks"


def test_session_hash_covers_content_and_line_map() -> None:
    entry = parse_transcript("\n".join(["", _msg("user", "x")]))
    expected = hashlib.sha256("User: x\n2".encode()).hexdigest()
    assert entry.hash == expected == session_hash("User: x", [2])
    moved = parse_transcript("\n".join(["", "", _msg("user", "x")]))
    assert moved.content == entry.content and moved.hash != entry.hash


# ---------------------------------------------------------------------------------------------------- masking


@pytest.mark.parametrize(
    "text, masked",
    [
        ("OPENAI_API_KEY=sk-abcdefghijklmnopqrstuvwxyz", "OPENAI_API_KEY=sk-***"),
        ('export GITHUB_TOKEN="ghp_0123456789abcdefghijKLMN"', 'export GITHUB_TOKEN="ghp_***"'),
        ("DB_PASSWORD: hunter2", "DB_PASSWORD: ***"),
        ('{"apiKey": "AKIA1234567890ABCDEFGH"}', '{"apiKey": "***"}'),
        ('{"refreshToken":"short"}', '{"refreshToken":"***"}'),
        ("tool --api-key abcdefghijklmnopqrstu run", "tool --api-key *** run"),
        ("tool --token 'tok123' run", "tool --token '***' run"),
        ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig", "Authorization: Bearer ***"),
        ("curl -H 'Authorization: Bearer abc'", "curl -H 'Authorization: Bearer ***'"),
        ("token Bearer ABCDEFGHIJKLMNOPQRSTUV here", "token Bearer *** here"),
        ("use sk-ant-api03-ABCDEFGHIJKLMNOPQRSTUVWXYZ", "use sk-ant-api03-***"),
        ("pat github_pat_11ABCDEFG0123456789_abcdefghijkl", "pat github_pat_***"),
        ("slack xoxb-1234567890-abcdefghijkl", "slack xoxb-***"),
        ("app xapp-1-A0123456789-abcdef", "app xapp-***"),
        ("groq gsk_abcdefghij1234567890", "groq gsk_***"),
        ("google AIzaSyA1234567890abcdefghijklmnop", "google AIza***"),
        ("pplx pplx-abcdefghij1234567890", "pplx pplx-***"),
        ("npm npm_abcdefghij1234567890", "npm npm_***"),
        ("bot 123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw", "bot 123456789:***"),
    ],
)
def test_mask_secrets(text: str, masked: str) -> None:
    assert mask_secrets(text) == masked


def test_mask_pem_private_key_keeps_only_armor_lines() -> None:
    pem = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\nQyNTUxOQAAACB\n-----END OPENSSH PRIVATE KEY-----"
    out = mask_secrets(f"key:\n{pem}\ndone")
    assert "b3BlbnNzaC1rZXktdjEAAAAA" not in out and "QyNTUxOQAAACB" not in out
    assert "-----BEGIN OPENSSH PRIVATE KEY-----\n…redacted…\n-----END OPENSSH PRIVATE KEY-----" in out
    assert out.endswith("done")


def test_mask_leaves_ordinary_text_alone() -> None:
    text = "We met on 2026-03-01 and agreed the skeleton plan; sk-short stays; the price is 123456:12."
    assert mask_secrets(text) == text
    assert mask_secrets("") == ""


# ---------------------------------------------------------------------------------------------------- line maps


def test_remap_lines() -> None:
    line_map = [4, 6, 7, 10, 13]
    assert remap_lines(1, 2, line_map) == (4, 6)
    assert remap_lines(3, 5, line_map) == (7, 13)
    assert remap_lines(1, 5, None) == (1, 5)
    assert remap_lines(1, 5, []) == (1, 5)
    assert remap_lines(4, 9, line_map) == (10, 9)  # out of range: left as is


# ---------------------------------------------------------------------------------------------------- files


def test_list_session_files(tmp_path: Path) -> None:
    for name in ["b.jsonl", "a.jsonl", "sessions.json", "x.jsonl.bak.1700000000", "notes.txt", "c.jsonl.reset.2026"]:
        (tmp_path / name).write_text("{}\n")
    (tmp_path / "dir.jsonl").mkdir()
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "nested.jsonl").write_text("{}\n")
    outside = tmp_path.parent / f"{tmp_path.name}-outside.jsonl"
    outside.write_text("{}\n")
    (tmp_path / "link.jsonl").symlink_to(outside)

    assert list_session_files(tmp_path) == [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    assert list_session_files(tmp_path, include_archives=True) == [
        tmp_path / "a.jsonl",
        tmp_path / "b.jsonl",
        tmp_path / "c.jsonl.reset.2026",
    ]
    assert list_session_files(tmp_path / "missing") == []


def test_session_display_path(tmp_path: Path) -> None:
    assert session_display_path(tmp_path / "abc-123.jsonl") == "sessions/abc-123.jsonl"
    assert session_display_path("abc.jsonl") == "sessions/abc.jsonl"


# ---------------------------------------------------------------------------------------------------- deltas


def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as handle:
        handle.write(data)


def test_delta_bytes_threshold(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"")
    tracker = SessionDeltaTracker(delta_bytes=1000, delta_messages=50)
    tracker.mark_indexed(path)
    _append(path, b"x" * 999)
    assert tracker.observe(path) is False
    assert tracker.state(path).pending_bytes == 999
    _append(path, b"x" * 251)
    assert tracker.observe(path) is True
    assert tracker.dirty_files == {path}
    assert tracker.state(path).pending_bytes == 250  # reduced by the threshold, not zeroed
    assert tracker.observe(path) is False  # no growth, no change
    tracker.mark_indexed(path)
    assert tracker.dirty_files == set()
    assert tracker.state(path).pending_bytes == 0
    assert tracker.state(path).last_size == 1250


def test_delta_messages_threshold(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"")
    tracker = SessionDeltaTracker()  # 100000 bytes / 50 messages
    tracker.mark_indexed(path)
    _append(path, b"{}\n" * 49)
    assert tracker.observe(path) is False
    assert tracker.state(path).pending_messages == 49
    _append(path, b"{}\n")
    assert tracker.observe(path) is True
    assert tracker.state(path).pending_messages == 0


def test_delta_zero_threshold_means_any_growth(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"")
    tracker = SessionDeltaTracker(delta_bytes=0, delta_messages=0)
    tracker.mark_indexed(path)
    assert tracker.observe(path) is False
    _append(path, b"a")
    assert tracker.observe(path) is True
    assert tracker.state(path).pending_bytes == 0


def test_delta_shrink_counts_the_whole_new_file(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"{}\n" * 100)
    tracker = SessionDeltaTracker(delta_bytes=100_000, delta_messages=50)
    tracker.mark_indexed(path)
    path.write_bytes(b"{}\n" * 40)  # compacted: shorter than before
    assert tracker.observe(path) is False
    state = tracker.state(path)
    assert (state.last_size, state.pending_bytes, state.pending_messages) == (120, 120, 40)
    _append(path, b"{}\n" * 10)
    assert tracker.observe(path) is True


def test_delta_newlines_not_counted_once_bytes_threshold_is_hit(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"")
    tracker = SessionDeltaTracker(delta_bytes=10, delta_messages=1000)
    tracker.mark_indexed(path)
    _append(path, b"\n" * 30)
    assert tracker.observe(path) is True
    assert tracker.state(path).pending_messages == 0
    assert tracker.state(path).pending_bytes == 20


def test_delta_missing_file_and_forget(tmp_path: Path) -> None:
    tracker = SessionDeltaTracker()
    assert tracker.observe(tmp_path / "missing.jsonl") is False
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"{}\n" * 60)
    assert tracker.observe(path) is True  # never indexed: the whole file is new
    tracker.forget(path)
    assert tracker.dirty_files == set() and tracker.state(path).last_size == 0
    with pytest.raises(ValueError):
        SessionDeltaTracker(delta_bytes=-1)


# ---------------------------------------------------------------------------------------------------- converters


@dataclass
class LCMessage:
    """Shaped like a LangChain BaseMessage."""

    type: str
    content: Any
    id: str | None = None


class Role(str, Enum):
    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"


@dataclass
class TextBlock:
    text: str
    block_type: str = "text"


@dataclass
class ImageBlock:
    url: str
    block_type: str = "image"


@dataclass
class LIMessage:
    """Shaped like a LlamaIndex ChatMessage."""

    role: Role
    blocks: list[Any] = field(default_factory=list)

    @property
    def content(self) -> str:
        return "\n".join(b.text for b in self.blocks if isinstance(b, TextBlock))


def test_langchain_shaped_history_round_trips() -> None:
    history = [
        LCMessage("system", "be brief"),
        LCMessage("human", "What is the capital of France?", id="m1"),
        LCMessage("ai", [{"type": "text", "text": "Paris."}, {"type": "tool_use", "name": "x"}]),
        LCMessage("tool", "tool output"),
        LCMessage("AIMessageChunk", ["Anything", " else?"]),
    ]
    text = messages_to_jsonl(history)
    records = [json.loads(line) for line in text.splitlines()]
    assert [r["message"]["role"] for r in records] == ["system", "user", "assistant", "tool", "assistant"]
    assert records[1]["id"] == "m1"
    entry = parse_transcript(text)
    assert entry.content == "User: What is the capital of France?\nAssistant: Paris.\nAssistant: Anything  else?".replace(
        "  ", " "
    )
    assert entry.line_map == (2, 3, 5)


def test_llamaindex_shaped_history_round_trips() -> None:
    history = [
        LIMessage(Role.USER, [TextBlock("hi there"), ImageBlock("http://x/y.png")]),
        LIMessage(Role.ASSISTANT, [TextBlock("hello")]),
        {"role": "user", "content": "a plain dict"},
    ]
    entry = parse_transcript(messages_to_jsonl(history))
    assert entry.content == "User: hi there\nAssistant: hello\nUser: a plain dict"


def test_history_object_with_messages_attribute_and_chat_store(tmp_path: Path) -> None:
    class History:
        messages = [LCMessage("human", "q"), LCMessage("ai", "a")]

    class Store:
        def get_keys(self) -> list[str]:
            return ["u1", "u2"]

        def get_messages(self, key: str) -> list[Any]:
            return [LIMessage(Role.USER, [TextBlock(f"from {key}")])]

    assert parse_transcript(messages_to_jsonl(History())).content == "User: q\nAssistant: a"
    exported = chat_store_to_jsonl(Store())
    assert {k: parse_transcript(v).content for k, v in exported.items()} == {"u1": "User: from u1", "u2": "User: from u2"}
    assert message_to_record(object()) is None


def test_write_session_file(tmp_path: Path) -> None:
    target = write_session_file(tmp_path / "sessions", "agent:main/../x", [LCMessage("human", "token OPENAI_API_KEY=abc")])
    assert target.parent == tmp_path / "sessions" and target.suffix == ".jsonl"
    assert "/" not in target.name and ".." not in target.name
    assert list_session_files(target.parent) == [target]
    assert read_session_file(target).content == "User: token OPENAI_API_KEY=***"
    assert not [p for p in target.parent.iterdir() if p.name.endswith(".tmp")]
    write_session_file(tmp_path / "sessions", "agent:main/../x", [LCMessage("human", "replaced")])
    assert read_session_file(target).content == "User: replaced"


def test_real_langchain_messages_if_installed() -> None:
    messages = pytest.importorskip("langchain_core.messages")
    text = messages_to_jsonl([messages.HumanMessage("hi"), messages.AIMessage("yo"), messages.SystemMessage("s")])
    assert parse_transcript(text).content == "User: hi\nAssistant: yo"


def test_real_llamaindex_messages_if_installed() -> None:
    llms = pytest.importorskip("llama_index.core.llms")
    text = messages_to_jsonl([llms.ChatMessage(role="user", content="hi"), llms.ChatMessage(role="assistant", content="yo")])
    assert parse_transcript(text).content == "User: hi\nAssistant: yo"


def test_import_is_cheap() -> None:
    import subprocess
    import sys

    code = "import sys, clawmem_core.sessions, clawmem_core.writing, clawmem_core.watcher; print('watchfiles' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=os.getcwd(), check=True)
    assert out.stdout.strip() == "False"
