"""``ClawmemStore``: LangGraph's long-term memory store (``BaseStore``) on clawmem's Markdown files.

.. code-block:: python

    from langchain_clawmem import ClawmemStore

    store = ClawmemStore(mem)
    agent = create_agent(model, tools, store=store)        # runtime.store / get_store() in tools
    store.put(("users", "dana"), "food", {"content": "Dana is vegetarian and loves Lisbon's pastéis."})
    store.search(("users",), query="what does Dana eat?")  # clawmem's hybrid search -> SearchItems with scores

**Layout.** A namespace is a folder under ``memory/`` and an item a Markdown file in it: ``("users", "dana")``,
key ``food`` is ``memory/users/dana/food.md``. The file is the item's ``content`` (the text field, when it is a
string) under a small front matter holding the key, the timestamps and the other fields as JSON::

    ---
    key: "food"
    created_at: "2026-05-14T09:30:00+00:00"
    updated_at: "2026-05-14T09:30:00+00:00"
    value: {"kind": "preference"}
    ---

    Dana is vegetarian and loves Lisbon's pastéis.

A person can read and edit these files; the index finds them like any other note (``memory_search`` included),
and a Markdown file someone adds to such a folder is an item too (its key is the file name, its value
``{"content": <text>}``). ``folder="agents/main"`` puts the namespaces under ``memory/agents/main/`` instead,
so several agents can share one workspace without seeing each other's items; :class:`ClawmemAgentsStore` maps
the first namespace label to an agent's own workspace.

**Names.** Namespace labels and keys become file names: characters a file name cannot hold (``/ \\ : * ? " < >
|``, control characters, ``%``, a leading ``.``, surrounding spaces) are percent-encoded, so no label or key can
leave its folder; a key too long for a file name is shortened with a hash (the full key stays in the front
matter). Symlinked folders and files are refused, never followed.

**Search.** With ``query``, ``search`` runs clawmem's hybrid search (BM25 + vectors) and returns the items whose
files matched, best first, with the best chunk's score; without it, items newest first (score ``None``).
``filter`` matches value fields (``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``). ``index`` and ``ttl``
arguments are accepted and ignored (every item is indexed in full; items do not expire).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import stat
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping
from urllib.parse import unquote

from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from clawmem_core import MemoryIndex
from clawmem_core.writing import remove_file, replace_file

__all__ = ["ClawmemAgentsStore", "ClawmemStore", "decode_name", "encode_name"]

MEMORY_DIR = "memory"
MAX_NAME_BYTES = 150
_UNSAFE = re.compile(r'[\x00-\x1f\x7f/\\:*?"<>|%]')
_WINDOWS_RESERVED = {"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(1, 10)), *(f"LPT{i}" for i in range(1, 10))}


def _pct(ch: str) -> str:
    return "".join(f"%{b:02X}" for b in ch.encode("utf-8"))


def encode_name(label: str) -> str:
    """A namespace label or key as a file-name-safe string (percent-encoding; reversible with :func:`decode_name`).
    Unicode letters (Chinese included) stay readable."""
    out = _UNSAFE.sub(lambda m: _pct(m.group()), label)
    if out.startswith("."):
        out = "%2E" + out[1:]
    if out[:1].isspace():
        out = _pct(out[0]) + out[1:]
    if out[-1:].isspace() or out.endswith("."):
        out = out[:-1] + _pct(out[-1])
    if out.split(".")[0].upper() in _WINDOWS_RESERVED:
        out = _pct(out[0]) + out[1:]
    return out


def decode_name(name: str) -> str:
    """The label or key a file name stands for."""
    return unquote(name)


def _key_file(key: str) -> str:
    name = encode_name(key)
    if len(name.encode("utf-8")) + 3 > MAX_NAME_BYTES:
        digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]
        head = name.encode("utf-8")[:60].decode("utf-8", errors="ignore").rstrip("%0123456789ABCDEF")
        name = f"{head}~{digest}"
    return name + ".md"


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


# -- filters (LangGraph's JSON filter operators) ------------------------------------------------------------------


def _op(value: Any, operator: str, operand: Any) -> bool:
    try:
        if operator == "$eq":
            return bool(value == operand)
        if operator == "$ne":
            return bool(value != operand)
        if operator == "$gt":
            return float(value) > float(operand)
        if operator == "$gte":
            return float(value) >= float(operand)
        if operator == "$lt":
            return float(value) < float(operand)
        if operator == "$lte":
            return float(value) <= float(operand)
    except (TypeError, ValueError):
        return False
    raise ValueError(f"unsupported filter operator: {operator}")


def _matches(value: Any, wanted: Any) -> bool:
    if isinstance(wanted, dict):
        if any(k.startswith("$") for k in wanted):
            return all(_op(value, k, v) for k, v in wanted.items())
        return isinstance(value, dict) and all(_matches(value.get(k), v) for k, v in wanted.items())
    return bool(value == wanted)


def _namespace_matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    pairs = zip(namespace, path) if condition.match_type == "prefix" else zip(reversed(namespace), reversed(path))
    return all(p == "*" or n == p for n, p in pairs)


class ClawmemStore(BaseStore):
    """A LangGraph ``BaseStore`` whose items are Markdown files of a clawmem workspace (see the module docs).

    ``folder`` (under ``memory/``) roots the namespaces; ``text_field`` names the value field written as the
    file's Markdown body; ``min_score`` is the minimum score of search hits (default 0: every match, ranked).
    """

    supports_ttl = False

    def __init__(
        self, memory: MemoryIndex, *, folder: str | None = None, text_field: str = "content", min_score: float = 0.0
    ) -> None:
        if getattr(memory, "workspace", "") is None:
            from clawmem_core.errors import ReplicaError

            raise ReplicaError(
                f"ClawmemStore needs the workspace: its items are Markdown files there, and this MemoryIndex serves "
                f"agent {memory.agent_id!r} from the store without it (a replica); open the store where the "
                "workspace is"
            )
        self.memory = memory
        parts = tuple(p for p in (folder or "").replace("\\", "/").split("/") if p)
        for part in parts:
            if part in (".", "..") or encode_name(part) != part:
                raise ValueError(f"folder must be plain folder names under memory/, got {folder!r}")
        self.root: tuple[str, ...] = (MEMORY_DIR, *parts)
        self.text_field = text_field
        self.min_score = min_score

    # -- paths --------------------------------------------------------------------------------

    def _folder(self, namespace: tuple[str, ...]) -> tuple[str, ...]:
        parts = []
        for label in namespace:
            if not isinstance(label, str) or not label:
                raise InvalidNamespaceError(f"namespace labels must be non-empty strings, got {namespace!r}")
            if "." in label or "\x00" in label:
                raise InvalidNamespaceError(f"namespace labels cannot contain '.' or NUL bytes: {namespace!r}")
            name = encode_name(label)
            if len(name.encode("utf-8")) > MAX_NAME_BYTES:
                raise InvalidNamespaceError(f"namespace label too long for a folder name: {label[:40]!r}...")
            parts.append(name)
        return (*self.root, *parts)

    def _relpath(self, namespace: tuple[str, ...], key: str) -> str:
        if not isinstance(key, str) or not key:
            raise ValueError(f"key must be a non-empty string, got {key!r}")
        return "/".join((*self._folder(namespace), _key_file(key)))

    def _namespace_of(self, relpath: str) -> tuple[str, ...] | None:
        parts = relpath.split("/")
        n = len(self.root)
        if tuple(parts[:n]) != self.root or len(parts) < n + 2 or not parts[-1].endswith(".md"):
            return None
        labels = tuple(decode_name(p) for p in parts[n:-1])
        if any(not label or "." in label or p.startswith(".") for label, p in zip(labels, parts[n:-1])):
            return None
        return labels

    # -- files --------------------------------------------------------------------------------

    def _parse(self, text: str) -> tuple[dict[str, Any], str]:
        """(front matter fields, body) of an item file; no valid front matter: ``({}, text)``."""
        if not text.startswith("---\n"):
            return {}, text
        end = text.find("\n---\n", 3)
        if end < 0:
            return {}, text
        fields: dict[str, Any] = {}
        for line in text[4:end].split("\n"):
            if not line.strip():
                continue
            name, sep, raw = line.partition(":")
            if not sep:
                return {}, text
            try:
                fields[name.strip()] = json.loads(raw.strip())
            except ValueError:
                return {}, text
        body = text[end + 5 :]
        return fields, body[1:] if body.startswith("\n") else body

    def _render(self, key: str, value: Mapping[str, Any], created: datetime, updated: datetime) -> str:
        rest = dict(value)
        body = rest.pop(self.text_field, None)
        if body is not None and not isinstance(body, str):
            rest[self.text_field] = body
            body = None
        lines = ["---", f"key: {_dump(key)}", f"created_at: {_dump(created.isoformat())}", f"updated_at: {_dump(updated.isoformat())}"]
        if rest:
            lines.append(f"value: {_dump(rest)}")
        if body is None:
            lines.append("text_field: null")
        lines += ["---", ""]
        text = "\n".join(lines) + "\n"
        if body is not None:
            text += body if body.endswith("\n") or not body else body + "\n"
        return text

    def _stat(self, relpath: str) -> os.stat_result | None:
        try:
            st = os.lstat(self.memory.workspace / relpath)
        except (FileNotFoundError, NotADirectoryError):
            return None
        return st if stat.S_ISREG(st.st_mode) else None

    def _load(self, relpath: str, namespace: tuple[str, ...], key: str | None = None) -> Item | None:
        st = self._stat(relpath)
        if st is None:
            return None
        try:
            text = self.memory.read(relpath).text
        except Exception:  # refused (a symlink swapped in) or unreadable: not an item
            return None
        fields, body = self._parse(text)
        mtime = datetime.fromtimestamp(st.st_mtime, timezone.utc)
        value = fields.get("value") if isinstance(fields.get("value"), dict) else {}
        value = dict(value)
        if "text_field" not in fields or fields.get("text_field") is not None:
            value[self.text_field] = body.rstrip("\n")
        stored_key = fields.get("key")
        if not isinstance(stored_key, str):
            stored_key = key if key is not None else decode_name(relpath.rsplit("/", 1)[-1][: -len(".md")])
        if key is not None and stored_key != key:
            return None  # a shortened name shared by another key
        return Item(
            value=value,
            key=stored_key,
            namespace=namespace,
            created_at=_timestamp(fields.get("created_at"), mtime),
            updated_at=_timestamp(fields.get("updated_at"), mtime),
        )

    def _item_files(self, prefix: tuple[str, ...]) -> Iterator[str]:
        """Relative paths of the item files under a namespace prefix (no symlink followed, hidden names skipped)."""
        try:
            start = "/".join(self._folder(prefix)) if prefix else "/".join(self.root)
        except InvalidNamespaceError:
            return
        base = self.memory.workspace
        top = base / start
        for part_path in [base / "/".join(self.root[: i + 1]) for i in range(len(self.root))] + [top]:
            if part_path.is_symlink():
                return
        if not top.is_dir():
            return
        for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and not os.path.islink(os.path.join(dirpath, d)))
            rel_dir = Path(os.path.relpath(dirpath, base)).as_posix()
            for name in sorted(filenames):
                if name.endswith(".md") and not name.startswith("."):
                    rel = f"{rel_dir}/{name}"
                    if self._namespace_of(rel) is not None:
                        yield rel

    # -- operations ---------------------------------------------------------------------------

    def _get(self, op: GetOp) -> Item | None:
        return self._load(self._relpath(tuple(op.namespace), op.key), tuple(op.namespace), op.key)

    def _put(self, op: PutOp) -> bool:
        namespace = tuple(op.namespace)
        if not namespace:
            raise InvalidNamespaceError("Namespace cannot be empty.")
        if namespace[0] == "langgraph":
            raise InvalidNamespaceError(f'Root label for namespace cannot be "langgraph". Got: {namespace}')
        relpath = self._relpath(namespace, op.key)
        if op.value is None:
            return remove_file(self.memory.workspace, relpath)
        value = dict(op.value)
        json.dumps(value)  # JSON-serialisable, or a TypeError before anything is written
        existing = self._load(relpath, namespace, op.key)
        now = _now()
        created = existing.created_at if existing is not None else now
        replace_file(self.memory.workspace, relpath, self._render(op.key, value, created, now))
        return True

    def _candidates(self, op: SearchOp) -> list[tuple[Item, float | None]]:
        prefix = tuple(op.namespace_prefix)
        if op.query:
            return self._ranked(op, prefix)
        items = []
        for rel in self._item_files(prefix):
            namespace = self._namespace_of(rel)
            item = self._load(rel, namespace) if namespace is not None else None
            if item is not None and (not op.filter or _matches(item.value, op.filter)):
                items.append(item)
        items.sort(key=lambda it: it.updated_at, reverse=True)
        return [(it, None) for it in items]

    def _ranked(self, op: SearchOp, prefix: tuple[str, ...]) -> list[tuple[Item, float | None]]:
        folder = "/".join(self._folder(prefix) if prefix else self.root) + "/"
        wanted = max(0, op.offset) + max(0, op.limit)
        fetch = max(20, wanted * 4)
        while True:
            hits = self.memory.search(op.query or "", max_results=fetch, min_score=self.min_score)
            best: dict[str, float] = {}
            for hit in hits:
                if hit.source == "memory" and hit.path.startswith(folder) and self._namespace_of(hit.path) is not None:
                    best[hit.path] = max(best.get(hit.path, float("-inf")), hit.score)
            ranked: list[tuple[Item, float | None]] = []
            for rel, score in sorted(best.items(), key=lambda kv: -kv[1]):
                namespace = self._namespace_of(rel)
                item = self._load(rel, namespace) if namespace is not None else None
                if item is not None and (not op.filter or _matches(item.value, op.filter)):
                    ranked.append((item, score))
            if len(ranked) >= wanted or len(hits) < fetch or fetch >= 2000:
                return ranked
            fetch *= 4

    def _search(self, op: SearchOp) -> list[SearchItem]:
        found = self._candidates(op)
        window = found[max(0, op.offset) : max(0, op.offset) + max(0, op.limit)]
        return [
            SearchItem(
                namespace=item.namespace,
                key=item.key,
                value=item.value,
                created_at=item.created_at,
                updated_at=item.updated_at,
                score=score,
            )
            for item, score in window
        ]

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        found = set()
        for rel in self._item_files(()):
            namespace = self._namespace_of(rel)
            if namespace is None:
                continue
            if op.match_conditions and not all(_namespace_matches(c, namespace) for c in op.match_conditions):
                continue
            found.add(namespace[: op.max_depth] if op.max_depth is not None else namespace)
        return sorted(found)[op.offset : op.offset + op.limit]

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run the operations in order (a search after a put in the same batch sees the put)."""
        results: list[Result] = []
        dirty = False
        try:
            for op in ops:
                _validate(op)
                if isinstance(op, PutOp):
                    dirty = self._put(op) or dirty
                    results.append(None)
                    continue
                if dirty and isinstance(op, SearchOp) and op.query:
                    self._reindex()
                    dirty = False
                if isinstance(op, GetOp):
                    results.append(self._get(op))
                elif isinstance(op, SearchOp):
                    results.append(self._search(op))
                elif isinstance(op, ListNamespacesOp):
                    results.append(self._list_namespaces(op))
                else:
                    raise ValueError(f"Unknown operation type: {type(op)}")
        finally:
            if dirty:
                self._reindex()
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`batch` in a worker thread (file and index work never blocks the event loop)."""
        return await asyncio.to_thread(self.batch, list(ops))

    def _reindex(self) -> None:
        self.memory.mark_dirty()
        self.memory.sync(reason="write")


def _validate(op: Op) -> None:
    try:
        from langgraph.store.base import validate_op_namespace
    except ImportError:  # pragma: no cover - older langgraph: our own label checks below still apply
        return
    validate_op_namespace(op)


def _timestamp(raw: Any, fallback: datetime) -> datetime:
    if isinstance(raw, str):
        try:
            parsed = datetime.fromisoformat(raw)
        except ValueError:
            return fallback
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)
    return fallback


class ClawmemAgentsStore(BaseStore):
    """A LangGraph ``BaseStore`` over several agents' workspaces: the namespace's first label names the agent
    (``{"main": mem_main, "support": mem_support}``), the rest are folders in that agent's ``memory/``.

    ``("support", "users", "dana")``, key ``food`` is ``memory/users/dana/food.md`` in the support agent's
    workspace. A search or listing with an empty prefix spans every agent; an unknown agent is an
    ``InvalidNamespaceError``. Other arguments are those of :class:`ClawmemStore`.
    """

    supports_ttl = False

    def __init__(self, agents: Mapping[str, MemoryIndex], **kwargs: Any) -> None:
        if not agents:
            raise ValueError("agents must name at least one MemoryIndex")
        self.stores = {str(agent): ClawmemStore(mem, **kwargs) for agent, mem in agents.items()}

    def _store(self, namespace: tuple[str, ...], *, need_folder: bool) -> tuple[ClawmemStore, tuple[str, ...]]:
        if not namespace or namespace[0] not in self.stores:
            raise InvalidNamespaceError(f"the first namespace label must name an agent ({sorted(self.stores)}), got {namespace!r}")
        if need_folder and len(namespace) < 2:
            raise InvalidNamespaceError(f"an item needs a folder after the agent id, got {namespace!r}")
        return self.stores[namespace[0]], tuple(namespace[1:])

    def _search(self, op: SearchOp) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        targets = [(agent, ()) for agent in sorted(self.stores)] if not prefix else [(prefix[0], prefix[1:])]
        window = max(0, op.offset) + max(0, op.limit)
        found: list[SearchItem] = []
        for agent, rest in targets:
            store, _ = self._store((agent,), need_folder=False)
            sub = store._search(op._replace(namespace_prefix=rest, offset=0, limit=window))
            found += [
                SearchItem((agent, *i.namespace), i.key, i.value, i.created_at, i.updated_at, i.score) for i in sub
            ]
        if op.query:
            found.sort(key=lambda i: -(i.score or 0.0))
        else:
            found.sort(key=lambda i: i.updated_at, reverse=True)
        return found[max(0, op.offset) : window]

    def _list(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        everything = ListNamespacesOp(match_conditions=None, max_depth=None, limit=2**31, offset=0)
        found = set()
        for agent, store in self.stores.items():
            for rest in store._list_namespaces(everything):
                namespace = (agent, *rest)
                if op.match_conditions and not all(_namespace_matches(c, namespace) for c in op.match_conditions):
                    continue
                found.add(namespace[: op.max_depth] if op.max_depth is not None else namespace)
        return sorted(found)[op.offset : op.offset + op.limit]

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run the operations in order, each on its agent's store."""
        results: list[Result] = []
        for op in ops:
            _validate(op)
            if isinstance(op, GetOp):
                store, rest = self._store(tuple(op.namespace), need_folder=True)
                item = store.batch([op._replace(namespace=rest)])[0]
                results.append(
                    None
                    if item is None
                    else Item(value=item.value, key=item.key, namespace=tuple(op.namespace), created_at=item.created_at, updated_at=item.updated_at)  # type: ignore[union-attr]
                )
            elif isinstance(op, PutOp):
                store, rest = self._store(tuple(op.namespace), need_folder=True)
                results.append(store.batch([op._replace(namespace=rest)])[0])
            elif isinstance(op, SearchOp):
                results.append(self._search(op))
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list(op))
            else:
                raise ValueError(f"Unknown operation type: {type(op)}")
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`batch` in a worker thread."""
        return await asyncio.to_thread(self.batch, list(ops))
