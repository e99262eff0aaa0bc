"""LangChain's own conformance suites (``langchain-tests``) against our retriever and tools."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("langchain_tests")

from langchain_core.tools import BaseTool  # noqa: E402
from langchain_tests.integration_tests import RetrieversIntegrationTests, ToolsIntegrationTests  # noqa: E402
from langchain_tests.unit_tests import ToolsUnitTests  # noqa: E402

from clawmem_core import MemoryIndex  # noqa: E402
from langchain_clawmem import (  # noqa: E402
    ClawmemRetriever,
    create_memory_get_tool,
    create_memory_search_tool,
    create_memory_write_tool,
)

from .conftest import open_index  # noqa: E402


class _WithMemory:
    memory: MemoryIndex

    @pytest.fixture(autouse=True)
    def _bind_memory(self, request: pytest.FixtureRequest, keyword_memory: MemoryIndex) -> None:
        type(self).memory = keyword_memory


class TestClawmemRetrieverStandard(_WithMemory, RetrieversIntegrationTests):
    @property
    def retriever_constructor(self) -> type[ClawmemRetriever]:
        return ClawmemRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"memory": self.memory}

    @property
    def retriever_query_example(self) -> str:
        return "Priya Marco Porto Redis"


class _WithHybridMemory:
    memory: MemoryIndex

    @pytest.fixture(autouse=True)
    def _bind_memory(self, request: pytest.FixtureRequest, hash_memory: MemoryIndex) -> None:
        type(self).memory = hash_memory


class TestClawmemRetrieverHybridStandard(_WithHybridMemory, RetrieversIntegrationTests):
    """The same suite in hybrid mode (HashEmbedder vectors + BM25), with no score threshold."""

    @property
    def retriever_constructor(self) -> type[ClawmemRetriever]:
        return ClawmemRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"memory": self.memory, "min_score": 0.0}

    @property
    def retriever_query_example(self) -> str:
        return "What did Priya do about the staging database?"


class _SearchTool(_WithMemory):
    @property
    def tool_constructor(self) -> BaseTool:
        return create_memory_search_tool(self.memory)

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {"query": "When is my weekly 1:1 with Marco?", "maxResults": 3}


class _GetTool(_WithMemory):
    @property
    def tool_constructor(self) -> BaseTool:
        return create_memory_get_tool(self.memory)

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {"path": "MEMORY.md", "from": 19, "lines": 1}


class TestMemorySearchToolUnit(_SearchTool, ToolsUnitTests):
    pass


class TestMemorySearchToolIntegration(_SearchTool, ToolsIntegrationTests):
    pass


class TestMemoryGetToolUnit(_GetTool, ToolsUnitTests):
    pass


class TestMemoryGetToolIntegration(_GetTool, ToolsIntegrationTests):
    pass


@pytest.fixture(scope="module")
def writable_memory(tmp_path_factory: pytest.TempPathFactory) -> Any:
    mem = open_index(tmp_path_factory.mktemp("write"))
    yield mem
    mem.close()


class _WriteTool:
    memory: MemoryIndex

    @pytest.fixture(autouse=True)
    def _bind_memory(self, request: pytest.FixtureRequest, writable_memory: MemoryIndex) -> None:
        type(self).memory = writable_memory

    @property
    def tool_constructor(self) -> BaseTool:
        return create_memory_write_tool(self.memory)

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {"text": "- Dana switched the team standup to 9:30", "target": "daily"}


class TestMemoryWriteToolUnit(_WriteTool, ToolsUnitTests):
    pass


class TestMemoryWriteToolIntegration(_WriteTool, ToolsIntegrationTests):
    pass
