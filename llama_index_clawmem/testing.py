"""A scripted LLM for examples and tests that must run without an API key.

:class:`ScriptedRecallLLM` is a function-calling LLM (built on llama-index-core's
``MockFunctionCallingLLM``) that follows the Memory Recall routine with real tool calls: it
calls ``memory_search`` with the user's question, then ``memory_get`` on the path and lines of
the best result, then answers with the line of the returned text that shares the most words
with the question. It reads the tool results it is given, so it only answers what the memory
tools really returned. It is **not** a language model: use a real LLM in production.
"""

from __future__ import annotations

import json
from typing import Any, Optional, Sequence
from uuid import uuid4

from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock, ToolCallBlock
from llama_index.core.llms.mock import MockFunctionCallingLLM

from clawmem_core.testing import best_line


NOTHING_FOUND = "I checked memory and found nothing about that."



def _text(message: ChatMessage) -> str:
    return "".join(b.text for b in message.blocks if isinstance(b, TextBlock))



def _tool_names(tools: Any) -> Optional[set[str]]:
    if tools is None:
        return None
    return {t.metadata.get_name() for t in tools}


class ScriptedRecallLLM(MockFunctionCallingLLM):
    """A deterministic function-calling LLM that runs the Memory Recall routine.

    Turn 1: ``memory_search(query=<question>)``. Turn 2: ``memory_get(path, from, lines)`` on the
    top result. Turn 3: an answer quoting the best-matching line with its citation. Drive it with
    ``FunctionAgent``/``AgentWorkflow``; a memory tool the agent does not have is skipped.
    """

    search_tool: str = "memory_search"
    get_tool: str = "memory_get"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.response_generator = self._respond

    @classmethod
    def class_name(cls) -> str:
        return "ScriptedRecallLLM"

    def _respond(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        return self.next_message(messages, _tool_names(kwargs.get("tools")))

    def next_message(self, messages: Sequence[ChatMessage], tool_names: Optional[set[str]] = None) -> ChatMessage:
        """The next turn of the routine for this conversation."""
        available = tool_names if tool_names is not None else {self.search_tool, self.get_tool}
        last_user = max((i for i, m in enumerate(messages) if m.role == MessageRole.USER), default=-1)
        question = _text(messages[last_user]) if last_user >= 0 else ""
        results = [m for m in messages[last_user + 1 :] if m.role == MessageRole.TOOL]
        if not results:
            if self.search_tool in available:
                return _call(self.search_tool, {"query": question})
            return _say(NOTHING_FOUND)
        payload = _payload(results[-1])
        if "results" in payload:  # a memory_search result
            hits = payload.get("results") or []
            if not hits:
                return _say(NOTHING_FOUND)
            top = hits[0]
            if self.get_tool in available:
                start, end = int(top["startLine"]), int(top["endLine"])
                return _call(self.get_tool, {"path": top["path"], "from": start, "lines": end - start + 1})
            return _answer(str(top.get("snippet", "")), question, top["path"], int(top["startLine"]))
        if "text" in payload and not payload.get("error"):  # a memory_get result
            return _answer(str(payload["text"]), question, str(payload.get("path", "")), int(payload.get("from") or 1))
        return _say(NOTHING_FOUND)


def _say(text: str) -> ChatMessage:
    return ChatMessage(role=MessageRole.ASSISTANT, content=text)


def _call(name: str, args: dict[str, Any]) -> ChatMessage:
    block = ToolCallBlock(tool_call_id=f"call_{uuid4().hex[:12]}", tool_name=name, tool_kwargs=args)
    return ChatMessage(role=MessageRole.ASSISTANT, blocks=[block])


def _answer(text: str, question: str, path: str, first_line: int) -> ChatMessage:
    found = best_line(text, question)
    if found is None:
        return _say(NOTHING_FOUND)
    index, line = found
    return _say(f"{line.lstrip('-* ').strip()} (Source: {path}#L{first_line + index})")


def _payload(message: ChatMessage) -> dict[str, Any]:
    try:
        data = json.loads(_text(message))
    except (TypeError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
