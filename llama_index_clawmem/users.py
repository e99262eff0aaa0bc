"""Memory per call for LlamaIndex: which user's memory a tool, memory block or retriever given a
:class:`~clawmem_core.registry.MemoryResolver` acts on.

The user is named in the agent's workflow ``Context`` (the object a LlamaIndex tool receives when it declares a
``ctx: Context`` parameter, and that ``agent.run(..., ctx=ctx)`` carries from run to run):

.. code-block:: python

    ctx = Context(agent)
    await ctx.store.set("user_id", "alice")        # or the agent state: {"user_id": "alice"}
    await agent.run("what do I play on Tuesdays?", ctx=ctx)

or, for code running outside a workflow (a retriever called directly, a tool called by hand) and for agent
runs started inside it, with :func:`memory_user`:

.. code-block:: python

    with memory_user("alice"):
        nodes = await retriever.aretrieve("cello")

The ``Context`` of the workflow step running the call is read first (a tool's own ``ctx`` argument, else
``Context.get_step_context()``): its store's top-level ``user_id`` (the resolver's ``key``), else the agent
state's. A user named in both places must be the same one. No user, or a user the resolver refuses, is a
:class:`~clawmem_core.errors.ConfigError`: nothing of anyone's memory is read.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Any, AsyncIterator, Iterator, Mapping, Union

from clawmem_core import MemoryIndex
from clawmem_core.errors import ConfigError
from clawmem_core.registry import MemoryResolver

__all__ = ["MemorySource", "amemory_for_call", "current_user", "memory_for_call", "memory_user"]

#: What the tools, blocks and retriever act on: one index, or a resolver naming the user's index per call.
MemorySource = Union[MemoryIndex, MemoryResolver]

_USER: contextvars.ContextVar[Any] = contextvars.ContextVar("clawmem_llama_index_user", default=None)


@contextlib.contextmanager
def memory_user(user: str) -> Iterator[None]:
    """Name ``user`` for the memory calls made in this block, and in the agent runs started in it (``agent.run``
    copies the current context when it is called): a plain, explicit alternative to the workflow ``Context``."""
    if not isinstance(user, str) or not user.strip():
        raise ConfigError(f"memory_user needs a non-empty user id, got {user!r}")
    token = _USER.set(user)
    try:
        yield
    finally:
        _USER.reset(token)


def current_user() -> Any:
    """The user :func:`memory_user` names here, ``None`` outside one."""
    return _USER.get()


def _step_context() -> Any:
    """The workflow ``Context`` of the step running this code, ``None`` outside a step."""
    try:
        from llama_index.core.workflow import Context
    except ImportError:  # pragma: no cover - llama-index-core always has it
        return None
    get = getattr(Context, "get_step_context", None)
    if get is None:  # an older llama-index-workflows: only a tool's own ctx argument names the run
        return None
    try:
        return get()
    except Exception:  # outside a workflow step
        return None


def _from_state(state: Any, key: str) -> Any:
    if isinstance(state, Mapping):
        return state.get(key)
    return getattr(state, key, None)


async def _user_in(ctx: Any, key: str) -> Any:
    store = getattr(ctx, "store", None)
    if store is None:
        return None
    found = await store.get(key, default=None)
    if found is None:
        found = _from_state(await store.get("state", default=None), key)
    return found


def _missing(key: str) -> ConfigError:
    return ConfigError(
        f"no {key!r} for this call: memory is per user here; name the user in the agent's Context "
        f"(await ctx.store.set({key!r}, ...) before agent.run(..., ctx=ctx)) or run inside "
        f"`with memory_user(...)`"
    )


def _one(key: str, in_context: Any, explicit: Any) -> Any:
    if in_context is not None and explicit is not None and in_context != explicit:
        raise ConfigError(
            f"two users for this call: {key}={in_context!r} in the workflow Context and {explicit!r} from "
            f"memory_user(); name one"
        )
    user = in_context if in_context is not None else explicit
    if user is None or (isinstance(user, str) and not user.strip()):
        raise _missing(key)
    return user


async def auser_for_call(resolver: MemoryResolver, ctx: Any = None) -> Any:
    """The user a call names (see the module documentation), or :class:`ConfigError`."""
    ctx = ctx if ctx is not None else _step_context()
    in_context = await _user_in(ctx, resolver.key) if ctx is not None else None
    return _one(resolver.key, in_context, _USER.get())


def user_for_call(resolver: MemoryResolver, ctx: Any = None) -> Any:
    """:func:`auser_for_call` for synchronous calls: only :func:`memory_user` can name the user here (a
    workflow ``Context``'s store is read with ``await``; use the async call, ``acall`` / ``aretrieve``)."""
    explicit = _USER.get()
    if ctx is not None or (explicit is None and _step_context() is not None):
        raise ConfigError(
            f"a workflow Context names the {resolver.key!r} only to async calls: use acall / aretrieve there "
            f"(or name the user with memory_user())"
        )
    return _one(resolver.key, None, explicit)


@contextlib.contextmanager
def memory_for_call(memory: MemorySource, ctx: Any = None) -> Iterator[MemoryIndex]:
    """``memory`` itself, or the index a resolver names for this call's user, leased until the block ends."""
    if isinstance(memory, MemoryResolver):
        with memory.resolve(user_for_call(memory, ctx)) as mem:
            yield mem
    else:
        yield memory


@contextlib.asynccontextmanager
async def amemory_for_call(memory: MemorySource, ctx: Any = None) -> AsyncIterator[MemoryIndex]:
    """:func:`memory_for_call` for asyncio: the workflow ``Context`` may name the user."""
    if isinstance(memory, MemoryResolver):
        async with memory.aresolve(await auser_for_call(memory, ctx)) as mem:
            yield mem
    else:
        yield memory
