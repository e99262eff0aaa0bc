"""The parts :class:`~clawmem_core.index.MemoryIndex` wires, one concern each:

========================  ==========================================================================
:mod:`.stores`            where the index lives, opening it, setting a damaged one aside, the handles
:mod:`.embedder`          which embedder is used (configured, passed in, or the fallback)
:mod:`.identity`          what an index was built from (a change means a full reindex)
:mod:`.syncing`           a sync's two phases, their locks, and the index's dirty state
:mod:`.background`        work off the caller's thread: background sync, interval sync, watch
:mod:`.freshness`         what a search syncs first (change journal, walk, small syncs)
:mod:`.namespaces`        the shared namespaces a search reads beside the agent's own index
:mod:`.calibration_vectors`  the embedder's calibration background vectors
:mod:`.searching`         a search: deadline, keyword-only degrade, rerank, namespaces' tags
:mod:`.reads`             ``memory_get``: the files, or the index's copies
:mod:`.writes`            notes and archived sessions, indexed at once
:mod:`.status`            the index's status report
:mod:`.recall`            the recall log: what searches gave the model, for dreaming
========================  ==========================================================================

Each part takes what it needs in its constructor (the configuration, the other parts) and can be
built and tested without the facade."""
