"""The shared namespaces an agent searches beside its own index (``config.shared``): opened
read-only on first search, searched as empty while their index does not exist or cannot be read
(with the reason kept for the payload and ``status``), reopened once their owner rebuilt them."""

from __future__ import annotations

import logging
import threading
from typing import Any

from ..config import MemoryConfig
from ..errors import ConfigError, StoreError
from ..store.base import MissingIndexError, Store
from .stores import StoreHandles

log = logging.getLogger("clawmem")


class SharedNamespaces:
    """The shared namespaces of one index. ``handles``: the open ones (``None`` before the first
    search); ``unavailable``: those searched as empty, with why (for logs, for the payload)."""

    def __init__(self, config: MemoryConfig, agent_id: str, stores: StoreHandles, lock: Any = None) -> None:
        self.config = config
        self.agent_id = agent_id
        self.stores = stores
        self._lock = lock if lock is not None else threading.RLock()
        self.handles: dict[str, Store] | None = None
        #: Shared namespaces that could not be opened (not indexed yet, unreadable): why.
        self.unavailable: dict[str, tuple[str, str]] = {}

    def search_store(self) -> Store:
        """What search reads: the agent's index, plus its shared namespaces (read-only). A
        namespace whose index does not exist yet (or cannot be read) is searched as empty, with
        the reason in :attr:`unavailable`, and opened once it appears; one replaced by its owner
        (set aside and rebuilt) is reopened."""
        if not self.config.shared:
            return self.stores.store
        from ..store.shared import SharedView

        retired = self.stores.retired
        with self._lock:
            if self.handles is None:
                self.handles = {}
            for ns in self.config.shared:
                if ns == self.agent_id:
                    continue
                store = self.handles.get(ns)
                if store is not None and store.superseded():
                    retired.append(self.handles.pop(ns))  # a search in another thread may still use it
                    store = None
                if store is not None:
                    try:  # rewritten in place (damaged, restored)? then seen as it is now, by every search
                        store.follow()
                        continue
                    except StoreError:  # reopened below: the same reason as any index that cannot be read
                        retired.append(self.handles.pop(ns))
                try:
                    opened = self.stores.backend.open_namespace(ns)
                    if opened.get_meta() is None:  # no such agent in the store, or it never synced
                        opened.close()
                        raise MissingIndexError(f"agent {ns!r} has no index in {self.stores.backend.location} yet")
                    self.handles[ns] = opened
                    self.unavailable.pop(ns, None)
                except ConfigError:
                    raise
                except StoreError as exc:  # the payload's reason names no machine path
                    public = ("not indexed yet: its agent has not indexed its workspace"
                              if isinstance(exc, MissingIndexError) else "its index cannot be read (see clawmem status)")
                    if ns not in self.unavailable:
                        log.warning("shared namespace %r is searched as empty: %s", ns, exc)
                    self.unavailable[ns] = (str(exc), public)
            return SharedView(self.stores.store, dict(self.handles), on_error=self.failed)

    def failed(self, ns: str, exc: StoreError) -> None:
        """A shared namespace failed during a search (damaged, vanished): left out of it, reported,
        and reopened by the next search (its own agent repairs it on its next sync)."""
        with self._lock:
            if self.handles is not None and ns in self.handles:
                self.stores.retired.append(self.handles.pop(ns))  # a search in another thread may still use it
            if ns not in self.unavailable:
                log.warning("shared namespace %r is left out of this search: %s", ns, exc)
            self.unavailable[ns] = (str(exc), "its index cannot be read (see clawmem status)")

    def open_handles(self) -> list[Store]:
        """The namespaces' open handles (closed with the index)."""
        return list((self.handles or {}).values())
