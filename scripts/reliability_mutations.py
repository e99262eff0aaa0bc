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
        "clawmem_core/index.py",
        "                except CorruptIndexError:\n                    self._set_aside(exc)",
        "                except CorruptIndexError:\n                    raise",
        ["tests/reliability/test_corrupt_state.py"],
    ),
    "rollback-guard": (
        "clawmem_core/store/sqlite.py",
        "            if not self.conn.getautocommit():\n                self.conn.execute(\"ROLLBACK\")",
        "            if True:\n                self.conn.execute(\"ROLLBACK\")",
        ["tests/reliability/test_disk.py"],
    ),
    "store-error-mapping": (
        "clawmem_core/store/sqlite.py",
        "if isinstance(exc, apsw.FullError):",
        "if isinstance(exc, ZeroDivisionError):",
        ["tests/reliability/test_disk.py"],
    ),
    "locks": (  # the cross-process file lock and SQLite's busy timeout are two layers: remove both
        "clawmem_core/store/sqlite.py",
        "conn.setbusytimeout(10_000)",
        "conn.setbusytimeout(0)",
        ["tests/reliability/test_concurrency.py"],
        [("clawmem_core/store/sqlite.py", 'lock = FileLock(str(self.path) + ".lock", timeout=600)',
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
    "deep-json": (  # only ValueError caught around the transcript parser
        "clawmem_core/sessions.py",
        "        except (ValueError, RecursionError):",
        "        except ValueError:",
        ["tests/reliability/test_transcripts.py::test_sync_survives_a_deeply_nested_line"],
    ),
    "write-outcome": (  # an indexing failure after the append raised from write()
        "clawmem_core/index.py",
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
        "                replan = replan or bool(mask & _ISDIR)",
        "                replan = replan",
        ["tests/core/test_change_journal.py::test_created_deleted_renamed_files_and_directories_are_seen"],
    ),
    "journal-other-writer": (  # the journal trusted after another instance or process wrote the index
        "clawmem_core/index.py",
        "        return at is not None and at[0] is self._store and at[1] == self._store.data_version()",
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
