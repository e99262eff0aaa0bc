"""The second phase of a sync: vectors for the chunks that wait for them.

The first phase writes every changed file's chunks for keyword search at once, with the vectors
the embedding cache already holds; chunks without are written *pending*. This phase embeds them
in index order, a group at a time (growing while groups are quick, up to what the store allows),
each group written in one transaction and its vectors put in the cache as each provider call
returns. A killed run leaves pending chunks behind, and
the next run carries on from them. A chunk replaced or deleted meanwhile is skipped when its
vectors arrive (the store only completes chunks that are still pending).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Sequence

from .chunking import Chunk, chunk_id, embedding_windows
from .embeddings.base import Embedder
from .embeddings.batching import batches_by_bytes
from .progress import PhaseMeter, SyncProgress
from .results import SyncReport
from .store.base import ChunkRow, Store
from .tuning import VECTOR_GROUP_SECONDS

#: Pending chunks embedded and written per transaction (a progress report each), at first: a
#: store whose transactions cost more than the work in them (``Store.vector_group_max``) lets the
#: group grow while a group takes less than :data:`GROUP_SECONDS`.
GROUP_CHUNKS = 16
#: A group (embed and write) faster than this (seconds) doubles the next one, up to the store's
#: ``vector_group_max``; one over twice this halves it, down to :data:`GROUP_CHUNKS`. A stop or a
#: deadline is then still seen within about a second.
GROUP_SECONDS = VECTOR_GROUP_SECONDS

Listener = Callable[[SyncProgress], None]


@dataclass
class FillResult:
    """What a vector phase did: chunks completed, and whether it stopped before the end
    (asked to stop, or out of time)."""

    completed: int = 0
    interrupted: bool = False


def windows_of(chunk: Chunk, emb: Embedder) -> list[Chunk]:
    """What the embedder sees of a chunk: itself when it fits the model's window, else windows."""
    return embedding_windows(chunk, emb.embed_window)


def cached_vectors(store: Store, emb: Embedder, hashes: Sequence[str]) -> dict[str, list[float]]:
    """Vectors of these text hashes already in the embedding cache."""
    return store.cache_get(emb.provider, emb.model, emb.provider_key, list(dict.fromkeys(hashes)))


def embed_texts(
    store: Store,
    emb: Embedder,
    texts: dict[str, str],
    *,
    cache_enabled: bool,
    report: SyncReport | None = None,
    durable: Sequence[Store] | None = None,
) -> tuple[dict[str, list[float]], int]:
    """Vectors for ``{hash: text}``: from the cache when enabled, else from the embedder in calls
    of at most 8000 bytes (or one provider batch job). New vectors go to the cache of
    ``durable`` (default: ``store``) as each call returns. Returns the vectors and the
    characters sent to the embedder."""
    hashes = list(texts)
    vectors = cached_vectors(store, emb, hashes) if cache_enabled else {}
    if report is not None:
        report.embeddings_cached += len(vectors)
    missing = [h for h in hashes if h not in vectors]
    body = [texts[h] for h in missing]
    groups = [list(range(len(body)))] if body and getattr(emb, "batch_active", False) else batches_by_bytes(body)
    sent = 0
    for batch in groups:
        got = emb.embed_documents([body[i] for i in batch])
        new = {missing[i]: v for i, v in zip(batch, got)}
        vectors.update(new)
        sent += sum(len(body[i]) for i in batch)
        if report is not None:
            report.embeddings_computed += len(new)
        if cache_enabled:
            for target in durable or [store]:
                target.cache_put(emb.provider, emb.model, emb.provider_key, new)
    return vectors, sent


def vector_rows(row: ChunkRow, windows: list[Chunk], vectors: dict[str, list[float]]) -> tuple[list[float] | None, list[ChunkRow]]:
    """A chunk's own vector (when it is embedded whole) and its window rows (when it is not)."""
    whole = Chunk(row.start_line, row.end_line, row.text, row.hash)
    if windows == [whole]:
        return vectors.get(row.hash), []
    return None, [
        ChunkRow(
            id=chunk_id(row.source, row.path, w.start_line, w.end_line, w.hash, row.model),
            path=row.path, source=row.source, start_line=w.start_line, end_line=w.end_line,
            hash=w.hash, model=row.model, text=w.text, embedding=vectors.get(w.hash), window=True,
        )
        for w in windows
    ]


def fill_vectors(
    store: Store,
    emb: Embedder,
    *,
    cache_enabled: bool = True,
    listener: Listener | None = None,
    report: SyncReport | None = None,
    should_stop: Callable[[], bool] | None = None,
    deadline: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    group_chunks: int | None = None,
    paths: Sequence[str] | None = None,
) -> FillResult:
    """Embed every pending chunk of ``store`` (of ``paths`` only, when given; chunks of other
    models are left alone). Stops early when ``should_stop()`` says so or ``clock()`` passes
    ``deadline``; what is done stays done. ``group_chunks``: chunks per transaction (by default
    :data:`GROUP_CHUNKS`, growing up to the store's ``vector_group_max`` while groups are quick)."""
    with store.writing():
        return _fill(store, emb, cache_enabled, listener, report, should_stop, deadline, clock, group_chunks, paths)


def _fill(
    store: Store,
    emb: Embedder,
    cache_enabled: bool,
    listener: Listener | None,
    report: SyncReport | None,
    should_stop: Callable[[], bool] | None,
    deadline: float | None,
    clock: Callable[[], float],
    group_chunks: int | None,
    paths: Sequence[str] | None,
) -> FillResult:
    result = FillResult()
    size = group_chunks or GROUP_CHUNKS
    top = size if group_chunks else max(size, store.vector_group_max)
    counts = store.vector_counts()
    if counts.pending == 0:
        return result
    meter = PhaseMeter("vectors", counts.total, counts.pending_chars, clock=clock)
    meter.done = counts.done
    if listener:
        listener(meter.event())
    after = 0
    idle_rounds = 0
    while True:
        if (should_stop and should_stop()) or (deadline is not None and clock() >= deadline):
            result.interrupted = True
            break
        began = clock()
        rows = [(rid, r) for rid, r in store.pending_chunks(size, after, paths)]
        if not rows:
            # Chunks written pending by a sync that ran meanwhile sit before ``after``: one more
            # pass from the start picks them up; a pass finding only other models' chunks ends.
            if after == 0 or idle_rounds:
                break
            after, idle_rounds = 0, 1
            continue
        after = rows[-1][0]
        mine = [r for _, r in rows if r.model == emb.model]
        if not mine:
            continue
        idle_rounds = 0
        pairs = [(r, windows_of(Chunk(r.start_line, r.end_line, r.text, r.hash), emb)) for r in mine]
        texts = {w.hash: w.text for _, ws in pairs for w in ws}
        vectors, sent = embed_texts(store, emb, texts, cache_enabled=cache_enabled, report=report)
        items = [(r.id, *vector_rows(r, ws, vectors)) for r, ws in pairs]
        done = store.set_vectors(items)
        result.completed += done
        if meter.done + done > meter.total:
            meter.grow(meter.done + done - meter.total, 0)
        ev = meter.advance(done, sent)
        if listener:
            listener(ev)
        took = clock() - began
        if took < GROUP_SECONDS and size < top:
            size = min(top, size * 2)
        elif took > 2 * GROUP_SECONDS and size > GROUP_CHUNKS:
            size = max(GROUP_CHUNKS, size // 2)
    if listener and not result.interrupted:
        final = store.vector_counts()
        if final.pending == 0 and meter.done < meter.total:
            meter.done = meter.total
            listener(meter.event())
    return result
