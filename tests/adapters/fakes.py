"""A scripted tool-calling chat model for driving ``create_agent`` in tests (no network, no key)."""

from __future__ import annotations

from typing import Any, Sequence

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field


class ScriptedToolModel(BaseChatModel):
    """Returns ``script`` one message per call (the last one again once exhausted) and records what each call
    received: the messages and the names of the bound tools."""

    script: list[AIMessage] = Field(default_factory=list)
    calls: list[list[BaseMessage]] = Field(default_factory=list)
    tools_seen: list[tuple[str, ...]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted-tools"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self.bind(tool_names=[convert_to_openai_tool(t)["function"]["name"] for t in tools])

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        self.calls.append(list(messages))
        self.tools_seen.append(tuple(kwargs.get("tool_names") or ()))
        message = self.script[min(len(self.calls), len(self.script)) - 1]
        return ChatResult(generations=[ChatGeneration(message=message)])


def call(name: str, args: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}
