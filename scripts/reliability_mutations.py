"""Check that each reliability test guards something: remove one protection at a time from a
copy of the library and confirm that the tests named for it fail.

    python scripts/reliability_mutations.py            # all mutations
    python scripts/reliability_mutations.py vector-cache temp-cleanup

Each mutation is a textual edit of ``clawmem_core`` in a temporary copy (the working tree is never
touched); the copy is put first on ``PYTHONPATH`` so test processes and their children import it.
Exit status 0 when every mutation made its tests fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: name -> (file, original text, replacement, pytest node ids[, further (file, old, new) edits])
MUTATIONS: dict[str, tuple] = {
    "served-sync": (  # a search a watcher answers for the CLI without the sync the command runs first
        "clawmem_core/cli.py",
        "        if mem.workspace is not None:  # a replica never syncs\n            walk = None if served",
        "        if mem.workspace is not None and not served:\n            walk = None if served",
        ["tests/core/test_watch_socket.py::test_many_files_changed_just_before_are_all_in_the_answer"],
    ),
    "served-peer-uid": (  # the watcher answers whoever connects
        "clawmem_core/watch_socket.py",
        "        if _peer_uid(conn) != os.getuid():\n            self.refused += 1",
        "        if False:\n            self.refused += 1",
        ["tests/core/test_watch_socket.py::test_another_user_is_refused"],
    ),
    "served-settings": (  # the watcher answers for settings other than its own
        "clawmem_core/watch_socket.py",
        'request.get("settings") in self.accepted',
        "True",
        ["tests/core/test_watch_socket.py::test_another_index_or_other_settings_run_the_command_itself"],
    ),
    "served-lock": (  # a second watcher of the index takes the socket
        "clawmem_core/watch_socket.py",
        "            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)",
        "            pass",
        ["tests/core/test_watch_socket.py::test_a_second_watcher_neither_serves_nor_takes_the_socket"],
    ),
    "walk-keys": (  # the recorded walk trusted without comparing the files' stat keys
        "clawmem_core/walk_snapshot.py",
        "        if stat_keys(items) != keys:",
        "        if stat_keys(items) is None:",
        ["tests/core/test_cli_walk.py::test_an_edit_in_place_with_its_old_mtime_put_back_is_found"],
    ),
    "walk-signature": (  # the recorded walk trusted after another connection committed to the index
        "clawmem_core/walk_snapshot.py",
        "        if index_signature(self.store_path) != tuple(sig) or _listed(items) != listed:",
        "        if _listed(items) != listed:",
        ["tests/core/test_cli_walk.py::test_a_commit_by_another_process_is_not_trusted"],
    ),
    "vector-cache": (  # vectors cached only with their group's write, not as each call returns
        "clawmem_core/vectors.py",
        "        if cache_enabled:\n            for target in durable or [store]:",
        "        if False:\n            for target in durable or [store]:",
        ["tests/reliability/test_crash.py::test_sigkill_during_full_reindex"],
    ),
    "temp-cleanup": (
        "clawmem_core/sync.py",
        "        writer.remove_leftovers()\n",
        "",
        ["tests/reliability/test_crash.py::test_orphaned_temp_files_do_not_accumulate"],
    ),
    "atomic-swap": (  # a full reindex written straight into the live index
        "clawmem_core/sync.py",
        "            with writer.rebuild() as tmp:",
        "            with __import__('contextlib').nullcontext(writer) as tmp:",
        ["tests/reliability/test_crash.py::test_sigkill_during_the_keyword_phase_of_a_full_reindex"],
    ),
    "corrupt-recovery": (
        "clawmem_core/index_parts/stores.py",
        "                except CorruptIndexError:\n                    self.set_aside(exc)",
        "                except CorruptIndexError:\n                    raise",
        ["tests/reliability/test_corrupt_state.py"],
    ),
    "rollback-guard": (
        "clawmem_core/store/sqlite/store.py",
        "                if not self.conn.getautocommit():\n                    self.conn.execute(\"ROLLBACK\")",
        "                if True:\n                    self.conn.execute(\"ROLLBACK\")",
        ["tests/core/test_store_writes.py::test_a_write_that_sqlite_rolled_back_itself_keeps_its_real_error"],
    ),
    "store-error-mapping": (
        "clawmem_core/store/sqlite/store.py",
        "if isinstance(exc, apsw.FullError):",
        "if isinstance(exc, ZeroDivisionError):",
        ["tests/reliability/test_disk.py"],
    ),
    "locks": (  # the cross-process file lock and SQLite's busy timeout are two layers: remove both
        "clawmem_core/store/sqlite/store.py",
        "conn.setbusytimeout(10_000)",
        "conn.setbusytimeout(0)",
        ["tests/reliability/test_concurrency.py"],
        [("clawmem_core/store/sqlite/backend.py", 'lock = FileLock(str(self.path) + ".lock", timeout=600)',
          'lock = FileLock(str(self.path) + f".{os.getpid()}.lock", timeout=600)')],
    ),
    "session-masking": (
        "clawmem_core/masking.py",
        "def mask_secrets(text: str, known: Sequence[str | None] = ()) -> str:\n",
        "def mask_secrets(text: str, known: Sequence[str | None] = ()) -> str:\n    return text\n",
        ["tests/reliability/test_secrets.py::test_session_transcripts_are_masked_in_the_index"],
    ),
    "mask-then-cut": (  # a provider message cut to its limit before the key is masked
        "clawmem_core/embeddings/retry.py",
        "    message = mask_and_clip(describe(exc), MESSAGE_LIMIT, secrets)",
        "    message = mask_and_clip(describe(exc)[:500], MESSAGE_LIMIT, secrets)",
        ["tests/providers/test_provider_secrets.py::test_no_key_prefix_survives_the_message_length_limit"],
        [("clawmem_core/masking.py", "        if len(secret) < KNOWN_PREFIX_MIN:\n            continue",
          "        if True:\n            continue")],
    ),
    "passphrase-whole": (  # a passphrase said in words masked but for its last 10 characters
        "clawmem_core/masking.py",
        "    if count >= 3:\n        return stop\n",
        "    if count >= 3:\n        return stop - 10\n",
        ["tests/core/test_masking_corpus.py::test_passwords_said_in_words_are_masked_whole",
         "tests/reliability/test_secrets.py::test_common_secret_shapes_are_masked"],
    ),
    "passphrase-first-word": (  # only the first word of a passphrase said in words masked
        "clawmem_core/masking.py",
        "    if count >= 3:\n        return stop\n",
        "    if count >= 3:\n        return end\n",
        ["tests/core/test_masking_corpus.py::test_passwords_said_in_words_are_masked_whole",
         "tests/reliability/test_secrets.py::test_common_secret_shapes_are_masked"],
    ),
    "bad-names": (  # file names that are not valid UTF-8 reach the index
        "clawmem_core/discovery.py",
        "    return split_bad_names(out, bad_names), missing",
        "    return out, missing",
        ["tests/reliability/test_bad_names.py::test_existing_index_keeps_updating_after_a_bad_name_appears"],
    ),
    "lone-surrogate": (  # a transcript message cut inside a surrogate pair failing every sync
        "clawmem_core/sessions.py",
        '    return _LONE_SURROGATES.sub("\\ufffd", _SPACES.sub(" ", _NEWLINES.sub(" ", value)).strip())',
        '    return _SPACES.sub(" ", _NEWLINES.sub(" ", value)).strip()',
        ["tests/reliability/test_transcripts.py::test_a_message_cut_inside_a_surrogate_pair_does_not_stop_the_sync"],
    ),
    "deep-json": (  # only ValueError caught around the transcript parser
        "clawmem_core/sessions.py",
        "        except (ValueError, RecursionError):",
        "        except ValueError:",
        ["tests/reliability/test_transcripts.py::test_sync_survives_a_deeply_nested_line"],
    ),
    "write-outcome": (  # an indexing failure after the append raised from write()
        "clawmem_core/index_parts/writes.py",
        "        except Exception as exc:  # noqa: BLE001 - the write succeeded; its indexing is what failed",
        "        except ZeroDivisionError as exc:",
        ["tests/reliability/test_write_outcome.py"],
    ),
    "delta-size-read": (  # the transcript size at the end of the sync taken as indexed
        "clawmem_core/sync.py",
        "                    self._sessions.mark_indexed(abs_path, size)",
        "                    self._sessions.mark_indexed(abs_path)",
        ["tests/reliability/test_transcripts.py::test_lines_appended_while_a_sync_works_are_not_counted_as_indexed"],
    ),
    "sessions-symlink": (  # a symlinked sessions directory left unwatched
        "clawmem_core/watcher.py",
        "        if self._sessions_dir is not None and self._sessions_dir.is_dir():",
        "        if self._sessions_dir is not None and self._sessions_dir.is_dir() and not self._sessions_dir.is_symlink():",
        ["tests/reliability/test_transcripts.py::test_symlinked_sessions_dir_is_watched_and_reindexed"],
    ),
    "stateful-deletes": (  # files gone from disk left in the index
        "clawmem_core/sync.py",
        "                store.delete_files(source, gone)",
        "                pass",
        ["tests/reliability/test_stateful_index.py"],
    ),
    "journal-overflow": (  # an overflowed change journal trusted: the edits it dropped are missed
        "clawmem_core/journal.py",
        "            if mask & _Q_OVERFLOW:\n                self._pending = replan = True",
        "            if mask & _Q_OVERFLOW:\n                pass",
        ["tests/core/test_change_journal.py::test_an_overflowed_journal_falls_back_to_a_walk"],
    ),
    "journal-dead": (  # a closed or failing change journal taken for "nothing changed"
        "clawmem_core/journal.py",
        "            self._broken = True\n            return True\n        replan",
        "            self._broken = True\n            return False\n        replan",
        ["tests/core/test_change_journal.py::test_a_dead_journal_falls_back_to_a_walk"],
    ),
    "journal-new-dirs": (  # directories created after the journal started left unwatched
        "clawmem_core/journal.py",
        "                    replan = True  # a directory came, went, or changed access",
        "                    pass  # a directory came, went, or changed access",
        ["tests/core/test_change_journal.py::test_created_deleted_renamed_files_and_directories_are_seen"],
    ),
    "journal-other-writer": (  # the journal trusted after another instance or process wrote the index
        "clawmem_core/index_parts/freshness.py",
        "        return at[2] is not None and at[2] is self.stores.vector_store and self.vector_mark()[1] == at[3]",
        "        return True",
        ["tests/core/test_change_journal.py::test_a_write_by_another_index_on_the_same_store_is_not_trusted_away"],
    ),
    "file-states-version": (  # indexed file states kept across writes to the index
        "clawmem_core/sync.py",
        "cached[0] is store and cached[1] == version",
        "cached[0] is store",
        ["tests/core/test_change_journal.py::test_cached_file_states_follow_a_sync_by_another_index"],
    ),
    "listing-ctime": (  # a directory listing reused when only its mtime was put back
        "clawmem_core/discovery.py",
        "key = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)",
        "key = (st.st_dev, st.st_ino, st.st_mtime_ns, 0)",
        ["tests/core/test_change_journal.py::test_walk_reuses_unchanged_directory_listings_and_sees_every_change"],
    ),
    "write-group-commit": (  # a write group that failed half-way committed instead of rolled back
        "clawmem_core/store/sqlite/store.py",
        "                if not self.conn.getautocommit():\n                    self.conn.execute(\"ROLLBACK\")",
        "                if not self.conn.getautocommit():\n                    self.conn.execute(\"COMMIT\")",
        ["tests/reliability/test_blind_spots.py::test_a_failure_inside_a_write_group_rolls_the_whole_group_back"],
    ),
    "mmr-last-similarity": (  # MMR penalising the similarity to the last chosen result, not the largest
        "clawmem_core/search.py",
        "            if s > max_sim[i]:\n                max_sim[i] = s",
        "            if True:\n                max_sim[i] = s",
        ["tests/core/test_search_scoring.py::test_mmr_penalises_the_largest_similarity_to_the_chosen"],
    ),
    "mmr-summed-similarity": (  # MMR penalising the sum of the similarities to the chosen results
        "clawmem_core/search.py",
        "            if s > max_sim[i]:\n                max_sim[i] = s",
        "            if True:\n                max_sim[i] += s",
        ["tests/core/test_search_scoring.py::test_mmr_penalises_the_largest_similarity_to_the_chosen"],
    ),
    "extra-path-evergreen": (  # undated notes under an extra path's memory/ folder left to decay
        "clawmem_core/search.py",
        'return (path.startswith("memory/") or "/memory/" in path) and date_from_path(path) is None',
        'return path.startswith("memory/") and date_from_path(path) is None',
        ["tests/core/test_search_scoring.py::test_extra_path_memory_notes_keep_their_score_under_decay"],
    ),
    "journal-incomplete": (  # a target whose parent directory cannot be watched taken as watched
        "clawmem_core/journal.py",
        "                    complete = False  # its parent cannot be watched",
        "                    pass  # its parent cannot be watched",
        ["tests/core/test_change_journal.py::test_a_watch_set_missing_a_parent_directory_is_reported_incomplete"],
    ),
    "journal-health-ignored": (  # a journal that cannot vouch for every target trusted when it saw no event
        "clawmem_core/journal.py",
        "        return self._pending or not self.healthy",
        "        return self._pending",
        ["tests/core/test_change_journal.py::test_a_watch_set_missing_a_parent_directory_is_reported_incomplete"],
    ),
    "status-index-exit": (  # `clawmem status --index` answering 0 after its sync failed
        "clawmem_core/cli.py",
        '    print("\\n".join(lines))\n    return EXIT_ERROR if index_error else EXIT_OK',
        '    print("\\n".join(lines))\n    return EXIT_OK',
        ["tests/core/test_cli.py::test_status_index_exits_1_when_indexing_fails"],
    ),
    "status-index-exit-json": (  # the same, with --json
        "clawmem_core/cli.py",
        "        print(json.dumps(out, ensure_ascii=False, indent=2))\n        return EXIT_ERROR if index_error else EXIT_OK",
        "        print(json.dumps(out, ensure_ascii=False, indent=2))\n        return EXIT_OK",
        ["tests/core/test_cli.py::test_status_index_exits_1_when_indexing_fails"],
    ),
    "mcp-session-key": (  # the MCP server's session key not passed to the tools (group chats cite sources)
        "clawmem_core/mcp_server.py",
        "        return await call_tool_payload(mem, name, arguments, session_key=session_key)",
        "        return await call_tool_payload(mem, name, arguments, session_key=None)",
        ["tests/core/test_mcp_security.py::test_the_session_key_reaches_every_search"],
    ),
    "mcp-host-check": (  # the HTTP server's own Host check skipped (only the SDK's remains, on its endpoint)
        "clawmem_core/mcp_server.py",
        "        if not self.policy.host_ok(headers.get(\"host\")):",
        "        if False:",
        ["tests/core/test_mcp_security.py::test_a_foreign_host_is_refused_on_every_loopback_address"],
    ),
    "mcp-token-check": (  # any bearer token accepted
        "clawmem_core/mcp_server.py",
        "        return found if scheme.lower() == \"bearer\" else None",
        "        return found or next(iter(self._tokens()), None)",
        ["tests/core/test_mcp_security.py::test_tokens_are_required_when_given"],
    ),
    "mcp-stateful": (  # the SDK's stateful sessions, which one client can exhaust
        "clawmem_core/mcp_server.py",
        "json_response=True, stateless=True,",
        "json_response=True, stateless=False,",
        ["tests/core/test_mcp_security.py::test_no_client_can_hold_sessions"],
    ),
    "discovery-order": (  # subdirectories walked in reverse order (the files' order then depends on the tree)
        "clawmem_core/discovery.py",
        "    subdirs.sort(reverse=True)",
        "    subdirs.sort()",
        ["tests/core/test_discovery.py::test_order_is_stable"],
    ),
    "openclaw-text-score": (  # OpenClaw's |r| / (1 + |r|) keyword score changed
        "clawmem_core/search.py",
        "        return r / (1 + r)",
        "        return r / (1.5 + r)",
        ["tests/core/test_fusion.py::test_openclaw_fusion_is_bit_for_bit"],
    ),
    "query-term-cap": (  # a huge query's keyword terms taken from the whole query, not its head
        "clawmem_core/search.py",
        "return search_terms(query[:MAX_QUERY_TERM_CHARS])[:MAX_QUERY_TERMS]",
        "return search_terms(query)[:MAX_QUERY_TERMS]",
        ["tests/core/test_bad_input.py::test_huge_query_is_answered_from_a_bounded_head"],
    ),
    "query-embed-cap": (  # a huge query embedded whole
        "clawmem_core/index_parts/searching.py",
        "emb.embed_query(q[:MAX_QUERY_EMBED_CHARS])",
        "emb.embed_query(q)",
        ["tests/core/test_bad_input.py::test_huge_query_is_answered_from_a_bounded_head"],
    ),
    "query-timeout": (  # a query embedding given the documents' timeout
        "clawmem_core/embeddings/openai.py",
        '"timeout": self.query_timeout} if query',
        '"timeout": self.timeout} if query',
        ["tests/providers/test_provider_openai.py::test_timeout_becomes_embedding_error",
         "tests/providers/test_provider_contract.py::test_timeout[openai-query]"],
    ),
    "postings-reused-rid": (  # a row id reused after the postings were written keeps the old row's postings
        "clawmem_core/store/sqlite/schema.py",
        "BEGIN UPDATE chunks_fts_postings_upto SET upto = new.rid - 1 WHERE id = 0; END;",
        "BEGIN SELECT 1; END;",
        ["tests/core/test_store_search.py::test_a_reused_row_id_never_gets_the_old_rows_postings"],
    ),
    "postings-deleted-rows": (  # rows deleted since the postings were written still read from them
        "clawmem_core/store/bm25.py",
        "        keep[inside] &= self.live[rows[inside]]\n",
        "",
        ["tests/core/test_store_search.py::test_deleted_rows_are_never_returned_from_the_postings"],
    ),
    "postings-rows-added-since": (  # rows written above the postings' watermark not read
        "clawmem_core/store/bm25.py",
        "        if self.upto + 1 < len(self.live) and self.live[self.upto + 1:].any():",
        "        if False:",
        ["tests/core/test_store_search.py::test_a_sync_writes_the_postings_once_enough_rows_wait"],
    ),
    "postings-settle-snapshot": (  # postings staged before another connection's commit copied in anyway
        "clawmem_core/store/sqlite/writes.py",
        'if conn.execute("PRAGMA data_version").fetchall()[0][0] == version:',
        "if True:",
        ["tests/core/test_store_search.py::test_another_connection_commits_during_the_pass_and_the_settle_writes_nothing"],
    ),
    "postings-temp-full": (  # a full temporary directory fails the sync
        "clawmem_core/store/sqlite/writes.py",
        "if isinstance(exc, (apsw.FullError, apsw.IOError, apsw.CantOpenError)):",
        "if False:",
        ["tests/core/test_store_search.py::test_a_full_temporary_directory_leaves_the_postings_as_they_were"],
    ),
}


def run(name: str) -> bool:
    rel, old, new, tests, *more = MUTATIONS[name]
    edits = [(rel, old, new), *(more[0] if more else [])]
    with tempfile.TemporaryDirectory(prefix="clawmem-mut-") as tmp:
        dst = Path(tmp)
        shutil.copytree(ROOT / "clawmem_core", dst / "clawmem_core")
        shutil.copytree(ROOT / "tests", dst / "tests", ignore=shutil.ignore_patterns("__pycache__"))
        if (ROOT / "scripts").is_dir():
            shutil.copytree(ROOT / "scripts", dst / "scripts", ignore=shutil.ignore_patterns("__pycache__"))
        for rel, old, new in edits:
            target = dst / rel
            text = target.read_text(encoding="utf-8")
            if old not in text:
                print(f"{name}: SKIPPED (the protected code changed; update the mutation)")
                return False
            target.write_text(text.replace(old, new, 1), encoding="utf-8")
        env = {**os.environ, "PYTHONPATH": str(dst)}
        r = subprocess.run(
            [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
            cwd=dst, env=env, capture_output=True, text=True,
        )
        caught = r.returncode != 0
        last = (r.stdout.strip().splitlines() or [""])[-1]
        print(f"{name}: {'caught' if caught else 'NOT CAUGHT'} ({last})")
        return caught


def main(argv: list[str]) -> int:
    names = argv or list(MUTATIONS)
    results = [run(n) for n in names]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
