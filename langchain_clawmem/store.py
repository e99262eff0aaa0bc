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

A person can read and edit these files; the index finds them like any other note (``memory_search`` included).
An item comes back exactly as it was put, whatever its size (no ``memory_get`` cap applies); one whose file
would pass ``sync.max_file_bytes``, the largest file indexed, is refused (``NoteTooLargeError``, nothing
written). A namespace is a folder holding at least one file the store wrote; a Markdown file someone adds to
such a folder is an item too (its key is the file name, its value ``{"content": <text>}``), while the ordinary
notes of other folders (``memory/projects/``...) are not items: ``list_namespaces`` does not list their
folders, and the store never replaces nor deletes them. ``folder="agents/main"`` puts the namespaces under ``memory/agents/main/`` instead,
so several agents can share one workspace without seeing each other's items; :class:`ClawmemAgentsStore` maps
the first namespace label to an agent's own workspace.

**Deleting.** ``delete`` (or ``put(..., None)``) removes the item's Markdown file, as LangGraph's stores forget
a deleted item: store items are the one kind of memory file clawmem deletes, and only at this explicit request.

**Names.** Namespace labels and keys become file names: characters a file name cannot hold (``/ \\ : * ? " < >
|``, control characters, ``%``, a leading ``.``, surrounding spaces) are percent-encoded, so no label or key can
leave its folder; ``~`` is encoded in keys too, and a key too long for a file name is shortened to
``<head>~<hash>`` (the full key stays in the front matter), so no key can take another key's file. Symlinked
folders and files are refused, never followed.

**Search.** With ``query``, ``search`` runs clawmem's hybrid search (BM25 + vectors) and returns the items whose
files matched, best first, each with its best chunk's score (an item matching neither the keywords nor the
meaning is no result); without it, items newest first (score ``None``). ``filter`` matches value fields
(``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``). As in LangGraph's own stores, the reads of one
``batch`` see the items as they were before it, then its puts apply (the last for a key wins). ``index`` and
``ttl`` arguments are accepted and ignored (every item is indexed in full; items do not expire).
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
from typing import Any, Iterable, Iterator, Mapping, Sequence
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
from clawmem_core.errors import PathNotAllowedError
from clawmem_core.safe_fs import UnsafeFileError, decode, open_regular
from clawmem_core.writing import NoteTooLargeError, remove_file, replace_file

from .session import session_key_of

__all__ = ["ClawmemAgentsStore", "ClawmemStore", "decode_name", "encode_name"]

MEMORY_DIR = "memory"
MAX_NAME_BYTES = 150
#: Bytes of a file read to see whether its front matter is one this store wrote (more when it goes on past them).
_HEAD_BYTES = 64 * 1024
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
    """The file name of ``key``: :func:`encode_name` with ``~`` encoded too, so a ``~`` in a name always marks a
    key shortened with a hash (``<head>~<digest>``) and no key can take another key's shortened name."""
    return _shortened(encode_name(key).replace("~", "%7E"), key)


def _legacy_key_file(key: str) -> str:
    """The file name earlier releases gave ``key`` (``~`` left as is): read, moved on the next put."""
    return _shortened(encode_name(key), key)


def _shortened(name: str, key: str) -> str:
    if len(name.encode("utf-8")) + 3 > MAX_NAME_BYTES:
        digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]
        head = name.encode("utf-8")[:60].decode("utf-8", errors="ignore").rstrip("%0123456789ABCDEF")
        name = f"{head}~{digest}"
    return name + ".md"


def _now() -> datetime:
    return datetime.now(timezone.utc)


_SURROGATE = re.compile("[\ud800-\udfff]")
#: What may not be written as the Markdown body: a NUL makes the file read as binary, a lone surrogate cannot be
#: encoded. Such a text field is kept in the front matter's JSON instead, escaped, so it still comes back as stored.
_UNWRITABLE_BODY = re.compile("[\x00\ud800-\udfff]")


def _dump(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return json.dumps(value, sort_keys=True) if _SURROGATE.search(text) else text


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

    @staticmethod
    def _is_item_front(fields: Mapping[str, Any]) -> bool:
        """Whether front matter fields are those this store writes (a key and both timestamps)."""
        return all(isinstance(fields.get(name), str) for name in ("key", "created_at", "updated_at"))

    def _render(self, key: str, value: Mapping[str, Any], created: datetime, updated: datetime) -> str:
        rest = dict(value)
        body = rest.pop(self.text_field, None)
        if body is not None and (not isinstance(body, str) or _UNWRITABLE_BODY.search(body)):
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
            text += body + "\n"  # one newline more than the text, taken off again when read: exact round trip
        return text

    def _read(self, relpath: str, limit: int | None = None) -> tuple[bytes, float] | None:
        """The bytes of the regular file at ``relpath`` (all of them, or the first ``limit``) and its mtime;
        ``None`` when it is missing. Opened without following a symlink (:class:`UnsafeFileError` otherwise)."""
        try:
            fd = open_regular(self.memory.workspace, tuple(relpath.split("/")))
        except (FileNotFoundError, NotADirectoryError):
            return None
        try:
            mtime = os.fstat(fd).st_mtime
            chunks: list[bytes] = []
            left = limit
            while left is None or left > 0:
                chunk = os.read(fd, 1 << 20 if left is None else min(left, 1 << 20))
                if not chunk:
                    break
                chunks.append(chunk)
                if left is not None:
                    left -= len(chunk)
            return b"".join(chunks), mtime
        finally:
            os.close(fd)

    def _fields(self, relpath: str) -> dict[str, Any] | None:
        """The front matter of ``relpath`` (``{}`` when it has none), ``None`` when it cannot be read as text.
        Reads the head of the file, and the rest only when the front matter goes on past it."""
        try:
            got = self._read(relpath, _HEAD_BYTES)
            if got is not None and len(got[0]) >= _HEAD_BYTES and b"\n---\n" not in got[0][3:]:
                got = self._read(relpath)
        except (UnsafeFileError, OSError):
            return None
        if got is None:
            return None
        head = got[0]
        if not head.startswith(b"---\n"):
            return {}
        end = head.find(b"\n---\n", 3)
        text = decode(head[: end + 5] if end >= 0 else head)
        return None if text is None else self._parse(text)[0]

    def _holds_items(self, folder: str, known: dict[str, bool]) -> bool:
        """Whether the folder ``folder`` (relative to the workspace) holds a file this store wrote: only such a
        folder is a namespace, and only there is a plain Markdown file an item. ``known`` caches the answers."""
        if folder not in known:
            found = False
            try:
                names = sorted(e.name for e in os.scandir(self.memory.workspace / folder)
                               if e.name.endswith(".md") and not e.name.startswith(".") and e.is_file(follow_symlinks=False))
            except OSError:
                names = []
            for name in names:
                fields = self._fields(f"{folder}/{name}")
                if fields and self._is_item_front(fields):
                    found = True
                    break
            known[folder] = found
        return known[folder]

    def _load(
        self, relpath: str, namespace: tuple[str, ...], key: str | None = None, known: dict[str, bool] | None = None
    ) -> Item | None:
        """The item in ``relpath``: a file this store wrote, or a plain Markdown file in a namespace folder; ``None``
        for anything else (an ordinary note, a symlink, binary content, another key's file)."""
        try:
            got = self._read(relpath)
        except (UnsafeFileError, OSError):  # a symlink, a FIFO, unreadable: not an item
            return None
        if got is None:
            return None
        data, st_mtime = got
        text = decode(data)
        if text is None:
            return None
        fields, body = self._parse(text)
        mtime = datetime.fromtimestamp(st_mtime, timezone.utc)
        if self._is_item_front(fields):
            value = dict(fields["value"]) if isinstance(fields.get("value"), dict) else {}
            if fields.get("text_field", "") is not None:
                value[self.text_field] = body[:-1] if body.endswith("\n") else body
            stored_key = fields["key"]
        else:  # a plain Markdown file: an item only in a namespace folder; its whole text is the content
            if not self._holds_items(relpath.rsplit("/", 1)[0], {} if known is None else known):
                return None
            fields, value = {}, {self.text_field: text.rstrip("\n")}
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
        """Relative paths of the Markdown files under a namespace prefix (no symlink followed, hidden names
        skipped); :meth:`_load` tells which are items."""
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

    def _paths(self, namespace: tuple[str, ...], key: str) -> list[str]:
        """Where the item of ``key`` is: its file, then the name earlier releases gave a key holding ``~``."""
        relpath = self._relpath(namespace, key)
        legacy = "/".join((*self._folder(namespace), _legacy_key_file(key)))
        return [relpath] if legacy == relpath else [relpath, legacy]

    def _get(self, op: GetOp) -> Item | None:
        namespace = tuple(op.namespace)
        for relpath in self._paths(namespace, op.key):
            item = self._load(relpath, namespace, op.key)
            if item is not None:
                return item
        return None

    def _existing(self, relpath: str, key: str) -> tuple[bool, datetime | None]:
        """Whether ``relpath`` holds the item of ``key`` and, if so, its ``created_at``. Raises
        :class:`PathNotAllowedError` for a file that is no item of ``key``: the store never replaces one."""
        try:
            got = self._read(relpath)
        except (UnsafeFileError, OSError):
            return False, None  # a symlink or something else at the name: replace_file refuses or replaces the link
        if got is None:
            return False, None
        data, st_mtime = got
        text = decode(data)
        fields = self._parse(text)[0] if text is not None else {}
        mtime = datetime.fromtimestamp(st_mtime, timezone.utc)
        if self._is_item_front(fields):
            if fields["key"] != key:
                raise PathNotAllowedError(f"refusing to replace {relpath}: it holds the item of another key "
                                          f"({fields['key'][:80]!r})")
            return True, _timestamp(fields.get("created_at"), mtime)
        if text is not None and self._holds_items(relpath.rsplit("/", 1)[0], {}):
            return True, mtime  # a note dropped into a namespace folder: an item
        raise PathNotAllowedError(f"refusing to replace {relpath}: it is an ordinary note, not an item of this "
                                  "store (the store never replaces or deletes the user's notes)")

    def _put(self, op: PutOp) -> bool:
        namespace = tuple(op.namespace)
        if not namespace:
            raise InvalidNamespaceError("Namespace cannot be empty.")
        if namespace[0] == "langgraph":
            raise InvalidNamespaceError(f'Root label for namespace cannot be "langgraph". Got: {namespace}')
        relpath, *legacy = self._paths(namespace, op.key)
        if op.value is None:
            return any([self._delete(path, namespace, op.key) for path in (relpath, *legacy)])
        value = dict(op.value)
        json.dumps(value)  # JSON-serialisable, or a TypeError before anything is written
        found, created = self._existing(relpath, op.key)
        moved = [path for path in legacy if self._load(path, namespace, op.key) is not None]
        if not found and moved:
            created = self._load(moved[0], namespace, op.key).created_at  # type: ignore[union-attr]
        now = _now()
        text = self._render(op.key, value, created or now, now)
        limit = self.memory.config.sync.max_file_bytes
        if len(text.encode("utf-8")) > limit:  # such a file is never indexed: the item could not be searched
            raise NoteTooLargeError(f"the item of key {op.key[:80]!r} takes {len(text.encode('utf-8')):,} bytes as a "
                                    f"file, past the {limit:,}-byte limit of the files the index reads "
                                    "(sync.max_file_bytes); nothing was written")
        replace_file(self.memory.workspace, relpath, text)
        for path in moved:  # the item moves to its current name
            remove_file(self.memory.workspace, path)
        return True

    def _delete(self, relpath: str, namespace: tuple[str, ...], key: str) -> bool:
        """Remove the file of ``key``'s item (store items are the one kind of Markdown file clawmem deletes); an
        ordinary note or another key's file at that name is left alone. A symlinked folder or a link at the name
        raises :class:`PathNotAllowedError`."""
        try:
            self._read(relpath, 0)
        except (UnsafeFileError, OSError):
            return remove_file(self.memory.workspace, relpath)  # refuses, with the reason
        if self._load(relpath, namespace, key) is None:
            return False
        return remove_file(self.memory.workspace, relpath)

    def _candidates(self, op: SearchOp, hits_out: dict[tuple[tuple[str, ...], str], Any] | None = None
                    ) -> list[tuple[Item, float | None]]:
        prefix = tuple(op.namespace_prefix)
        if op.query:
            return self._ranked(op, prefix, hits_out)
        items = []
        known: dict[str, bool] = {}
        for rel in self._item_files(prefix):
            namespace = self._namespace_of(rel)
            item = self._load(rel, namespace, known=known) if namespace is not None else None
            if item is not None and (not op.filter or _matches(item.value, op.filter)):
                items.append(item)
        items.sort(key=lambda it: (-it.updated_at.timestamp(), it.namespace, it.key))
        return [(it, None) for it in items]

    def _ranked(self, op: SearchOp, prefix: tuple[str, ...],
                hits_out: dict[tuple[tuple[str, ...], str], Any] | None = None) -> list[tuple[Item, float | None]]:
        """The items clawmem's hybrid search finds for the query, each with its best chunk's score, best first
        (equal scores: newest first). A hit at score 0 matched neither the keywords nor the meaning: no result.
        ``hits_out`` receives each ranked item's best hit (the search itself is not recorded: only the items
        returned are, by :meth:`_search`)."""
        folder = "/".join(self._folder(prefix) if prefix else self.root) + "/"
        wanted = max(0, op.offset) + max(0, op.limit)
        fetch = max(20, wanted * 4)
        known: dict[str, bool] = {}
        while True:
            hits = self.memory.search(op.query or "", max_results=fetch, min_score=self.min_score, record=False)
            best: dict[str, float] = {}
            best_hit: dict[str, Any] = {}
            for hit in hits:
                if hit.score <= 0 or hit.source != "memory" or not hit.path.startswith(folder):
                    continue
                if self._namespace_of(hit.path) is not None and hit.score > best.get(hit.path, float("-inf")):
                    best[hit.path], best_hit[hit.path] = hit.score, hit
            ranked: list[tuple[Item, float | None]] = []
            for rel, score in best.items():
                namespace = self._namespace_of(rel)
                item = self._load(rel, namespace, known=known) if namespace is not None else None
                if item is not None and (not op.filter or _matches(item.value, op.filter)):
                    ranked.append((item, score))
                    if hits_out is not None:
                        hits_out[(item.namespace, item.key)] = best_hit[rel]
            ranked.sort(key=lambda pair: (-(pair[1] or 0.0), -pair[0].updated_at.timestamp(), pair[0].namespace, pair[0].key))
            if len(ranked) >= wanted or len(hits) < fetch or fetch >= 2000:
                return ranked
            fetch *= 4

    def _search(self, op: SearchOp) -> list[SearchItem]:
        page = self._search_page(op)
        if op.query:
            self.record_recall(op.query, [hit for _, hit in page if hit is not None])
        return [item for item, _ in page]

    def _search_page(self, op: SearchOp) -> list[tuple[SearchItem, Any]]:
        """The page of items ``op`` asks for, each with its best search hit (``None`` without a query)."""
        hits: dict[tuple[tuple[str, ...], str], Any] = {}
        found = self._candidates(op, hits)
        window = found[max(0, op.offset) : max(0, op.offset) + max(0, op.limit)]
        return [
            (
                SearchItem(
                    namespace=item.namespace,
                    key=item.key,
                    value=item.value,
                    created_at=item.created_at,
                    updated_at=item.updated_at,
                    score=score,
                ),
                hits.get((item.namespace, item.key)),
            )
            for item, score in window
        ]

    def record_recall(self, query: str, hits: Sequence[Any]) -> None:
        """Record ``hits`` (the best chunk of each item a search returned) in the index's recall log, under the
        LangGraph thread when there is one. Never raises."""
        if hits:
            self.memory.record_recall(query, list(hits), session_key_of(None))

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        """The namespaces holding items (folders with a file this store wrote; ordinary note folders are not
        namespaces), sorted, as ``InMemoryStore`` lists them."""
        found = set()
        known: dict[str, bool] = {}
        for rel in self._item_files(()):
            namespace = self._namespace_of(rel)
            if namespace is None or not self._holds_items(rel.rsplit("/", 1)[0], known):
                continue
            if op.match_conditions and not all(_namespace_matches(c, namespace) for c in op.match_conditions):
                continue
            found.add(namespace[: op.max_depth] if op.max_depth is not None else namespace)
        return sorted(found)[op.offset : op.offset + op.limit]

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run the operations as LangGraph's own stores do: the reads (get, search, list) see the items as they
        were before the batch, then its puts and deletes are applied (the last one for a key wins) and the index
        is brought up to date once."""
        ops = list(ops)
        results: list[Result] = [None] * len(ops)
        puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for i, op in enumerate(ops):
            _validate(op)
            if isinstance(op, PutOp):
                puts.pop((tuple(op.namespace), op.key), None)
                puts[(tuple(op.namespace), op.key)] = op
            elif isinstance(op, GetOp):
                results[i] = self._get(op)
            elif isinstance(op, SearchOp):
                results[i] = self._search(op)
            elif isinstance(op, ListNamespacesOp):
                results[i] = self._list_namespaces(op)
            else:
                raise ValueError(f"Unknown operation type: {type(op)}")
        dirty = False
        try:
            for put in puts.values():
                dirty = self._put(put) or dirty
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
        found: list[tuple[SearchItem, ClawmemStore, Any]] = []
        for agent, rest in targets:
            store, _ = self._store((agent,), need_folder=False)
            sub = store._search_page(op._replace(namespace_prefix=rest, offset=0, limit=window))
            found += [
                (SearchItem((agent, *i.namespace), i.key, i.value, i.created_at, i.updated_at, i.score), store, hit)
                for i, hit in sub
            ]
        if op.query:
            found.sort(key=lambda f: -(f[0].score or 0.0))
        else:
            found.sort(key=lambda f: f[0].updated_at, reverse=True)
        page = found[max(0, op.offset) : window]
        if op.query:  # each agent's log records what of its memory the page holds
            for store in {id(s): s for _, s, _ in page}.values():
                store.record_recall(op.query, [hit for _, s, hit in page if s is store and hit is not None])
        return [item for item, _, _ in page]

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
        """Run the operations on their agents' stores: the reads first, on the items as they were before the
        batch, then the puts and deletes (as :meth:`ClawmemStore.batch`)."""
        ops = list(ops)
        results: list[Result] = [None] * len(ops)
        puts: dict[str, dict[tuple[tuple[str, ...], str], PutOp]] = {}
        for i, op in enumerate(ops):
            _validate(op)
            if isinstance(op, GetOp):
                store, rest = self._store(tuple(op.namespace), need_folder=True)
                item = store._get(op._replace(namespace=rest))
                results[i] = (
                    None
                    if item is None
                    else Item(value=item.value, key=item.key, namespace=tuple(op.namespace), created_at=item.created_at, updated_at=item.updated_at)
                )
            elif isinstance(op, PutOp):
                self._store(tuple(op.namespace), need_folder=True)
                per_agent = puts.setdefault(op.namespace[0], {})
                per_agent.pop((tuple(op.namespace), op.key), None)
                per_agent[(tuple(op.namespace), op.key)] = op._replace(namespace=tuple(op.namespace[1:]))
            elif isinstance(op, SearchOp):
                results[i] = self._search(op)
            elif isinstance(op, ListNamespacesOp):
                results[i] = self._list(op)
            else:
                raise ValueError(f"Unknown operation type: {type(op)}")
        for agent, agent_puts in puts.items():
            self.stores[agent].batch(list(agent_puts.values()))
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`batch` in a worker thread."""
        return await asyncio.to_thread(self.batch, list(ops))
