"""A scripted chat model for examples and tests that must run without an API key.

:class:`ScriptedRecallChatModel` follows the Memory Recall routine with real tool calls: it
calls ``memory_search`` with the user's question, then ``memory_get`` on the path and lines of
the best result, then answers with the line of the returned text that shares the most words
with the question. It reads the tool results it is given, so it only answers what the memory
tools really returned. It is **not** a language model: use a real chat model in production.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Sequence

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from clawmem_core.testing import best_line


NOTHING_FOUND = "I checked memory and found nothing about that."



def _text_of(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(
        part if isinstance(part, str) else str(part.get("text", "")) for part in content if isinstance(part, (str, dict))
    )



class ScriptedRecallChatModel(BaseChatModel):
    """A deterministic tool-calling chat model that runs the Memory Recall routine.

    Turn 1: ``memory_search(query=<question>)``. Turn 2: ``memory_get(path, from, lines)`` on the
    top result. Turn 3: an answer quoting the best-matching line with its citation. Works with
    ``create_agent`` (``bind_tools`` is supported); a memory tool it was not bound to is skipped.
    """

    search_tool: str = "memory_search"
    get_tool: str = "memory_get"

    @property
    def _llm_type(self) -> str:
        return "scripted-recall"

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        names = [convert_to_openai_tool(t)["function"]["name"] for t in tools]
        return self.bind(tool_names=names, **kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        names = kwargs.get("tool_names")
        message = self.next_message(messages, set(names) if names is not None else None)
        return ChatResult(generations=[ChatGeneration(message=message)])

    def next_message(self, messages: Sequence[BaseMessage], tool_names: set[str] | None = None) -> AIMessage:
        """The next turn of the routine for this conversation."""
        available = tool_names if tool_names is not None else {self.search_tool, self.get_tool}
        last_user = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=-1)
        question = _text_of(messages[last_user]) if last_user >= 0 else ""
        turn = sum(isinstance(m, AIMessage) for m in messages[last_user + 1 :]) + 1
        results = [m for m in messages[last_user + 1 :] if isinstance(m, ToolMessage)]
        if not results:
            if self.search_tool in available:
                return self._call(self.search_tool, {"query": question}, turn)
            return AIMessage(content=NOTHING_FOUND)
        payload = _payload(results[-1])
        if "results" in payload:  # a memory_search result
            hits = payload.get("results") or []
            if not hits:
                return AIMessage(content=NOTHING_FOUND)
            top = hits[0]
            if self.get_tool in available:
                start, end = int(top["startLine"]), int(top["endLine"])
                return self._call(self.get_tool, {"path": top["path"], "from": start, "lines": end - start + 1}, turn)
            return self._answer(str(top.get("snippet", "")), question, top["path"], int(top["startLine"]))
        if "text" in payload and not payload.get("error"):  # a memory_get result
            return self._answer(str(payload["text"]), question, str(payload.get("path", "")), int(payload.get("from") or 1))
        return AIMessage(content=NOTHING_FOUND)

    @staticmethod
    def _call(name: str, args: dict[str, Any], turn: int) -> AIMessage:
        return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": f"call_{turn}_{name}", "type": "tool_call"}])

    @staticmethod
    def _answer(text: str, question: str, path: str, first_line: int) -> AIMessage:
        found = best_line(text, question)
        if found is None:
            return AIMessage(content=NOTHING_FOUND)
        index, line = found
        return AIMessage(content=f"{line.lstrip('-* ').strip()} (Source: {path}#L{first_line + index})")


def _payload(message: ToolMessage) -> dict[str, Any]:
    if isinstance(message.artifact, dict):
        return message.artifact
    try:
        data = json.loads(_text_of(message))
    except (TypeError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
