"""Chunking, ids and the embedding input limit (SPEC 3; OpenClaw tests 26-28, 38-41)."""

from __future__ import annotations

import hashlib

import pytest

from clawmem_core.chunking import Chunk, chunk_id, chunk_markdown, embedding_windows, remap_lines
from clawmem_core.embeddings.base import MAX_INPUT_BYTES
from clawmem_core.embeddings.limits import max_input_bytes
from clawmem_core.testing import HashEmbedder
from clawmem_core.text import weighted_length


def lines_of(content: str, c: Chunk) -> str:
    return "\n".join(content.split("\n")[c.start_line - 1 : c.end_line])


# -- limits, overlap, line ranges ----------------------------------------------------------------


def test_long_single_line_splits_into_chunks_within_the_char_limit() -> None:
    content = "a" * (1600 * 3 + 25)
    chunks = chunk_markdown(content, tokens=400, overlap=0)
    assert len(chunks) > 1
    assert all(len(c.text) <= 1600 for c in chunks)
    assert "".join(c.text for c in chunks) == content
    # Pieces of one long line share its line number.
    assert all(c.start_line == c.end_line == 1 for c in chunks)


def test_defaults_are_400_tokens_and_80_overlap() -> None:
    content = "\n".join(f"line {i:04d} " + "x" * 90 for i in range(200))
    assert chunk_markdown(content) == chunk_markdown(content, tokens=400, overlap=80)
    assert all(len(c.text) <= 1600 for c in chunk_markdown(content))


def test_english_chunks_stay_within_tokens_times_four() -> None:
    content = "\n".join("The quick brown fox jumps over the lazy dog number %d." % i for i in range(300))
    for tokens in (10, 50, 200):
        chunks = chunk_markdown(content, tokens=tokens, overlap=tokens // 5)
        limit = max(32, tokens * 4)
        assert chunks
        assert all(len(c.text) <= limit for c in chunks)


def test_chunk_text_is_exactly_its_line_range() -> None:
    content = "\n".join(f"line number {i} with some words" for i in range(1, 101))
    chunks = chunk_markdown(content, tokens=40, overlap=10)
    assert len(chunks) > 5
    for c in chunks:
        assert 1 <= c.start_line <= c.end_line <= 100
        assert c.text == lines_of(content, c)


def test_line_numbers_are_one_based() -> None:
    chunks = chunk_markdown("first\nsecond\nthird", tokens=400, overlap=0)
    assert [(c.start_line, c.end_line) for c in chunks] == [(1, 3)]
    assert chunk_markdown("\n\n\nfourth", tokens=400, overlap=0)[0].end_line == 4


def test_overlap_carries_whole_trailing_lines_into_the_next_chunk() -> None:
    content = "\n".join(f"{i:03d}" + "y" * 36 for i in range(1, 61))  # 40-char lines
    chunks = chunk_markdown(content, tokens=50, overlap=20)  # 200 chars, 80 of overlap
    assert len(chunks) > 3
    for prev, nxt in zip(chunks, chunks[1:]):
        assert nxt.start_line <= prev.end_line, "overlap should repeat lines"
        carried = content.split("\n")[nxt.start_line - 1 : prev.end_line]
        assert prev.text.endswith("\n".join(carried))
        assert nxt.text.startswith("\n".join(carried))
        # About overlap*4 characters: at least 80, and whole lines (at most one line more).
        assert 80 <= sum(len(x) + 1 for x in carried) <= 80 + 41


def test_no_overlap_means_consecutive_line_ranges() -> None:
    content = "\n".join(f"{i:03d}" + "z" * 36 for i in range(1, 61))
    chunks = chunk_markdown(content, tokens=50, overlap=0)
    for prev, nxt in zip(chunks, chunks[1:]):
        assert nxt.start_line == prev.end_line + 1


def test_long_line_pieces_share_its_line_number_between_short_lines() -> None:
    content = "short one\n" + "b" * 5000 + "\nshort three"
    chunks = chunk_markdown(content, tokens=100, overlap=0)
    long_pieces = [c for c in chunks if "b" * 100 in c.text]
    assert len(long_pieces) >= 12
    assert all(2 in range(c.start_line, c.end_line + 1) for c in long_pieces)
    assert all(c.start_line == c.end_line == 2 for c in long_pieces[1:-1])
    assert chunks[0].start_line == 1 and chunks[-1].end_line == 3
    assert "".join(c.text for c in chunks).replace("\n", "") == content.replace("\n", "")


def test_whitespace_only_chunks_are_dropped() -> None:
    assert chunk_markdown("   \n\n\t\n  ") == []
    assert chunk_markdown("") == []
    content = "a" * 40 + "\n" + " " * 200 + "\n" + "c" * 40
    chunks = chunk_markdown(content, tokens=10, overlap=0)
    assert all(c.text.strip() for c in chunks)


def test_overlap_is_clamped_below_tokens() -> None:
    content = "\n".join("w" * 20 for _ in range(50))
    # overlap >= tokens must not loop forever nor repeat everything.
    chunks = chunk_markdown(content, tokens=10, overlap=1000)
    assert chunks and chunks[-1].end_line == 50


def test_hash_is_sha256_of_chunk_text() -> None:
    for c in chunk_markdown("alpha\nbeta\n" * 100, tokens=20, overlap=5):
        assert c.hash == hashlib.sha256(c.text.encode("utf-8")).hexdigest()


def test_chunk_id_is_sha256_of_source_path_lines_hash_model() -> None:
    expected = hashlib.sha256(b"memory:MEMORY.md:5:7:abc123:text-embedding-3-small").hexdigest()
    assert chunk_id("memory", "MEMORY.md", 5, 7, "abc123", "text-embedding-3-small") == expected
    assert chunk_id("memory", "MEMORY.md", 5, 7, "abc123", "other") != expected


# -- line remapping (test 27) --------------------------------------------------------------------


def test_remap_lines_maps_to_source_lines() -> None:
    content = "\n".join(["User: one", "Assistant: two", "User: three", "Assistant: four", "User: five"])
    chunks = chunk_markdown(content, tokens=10, overlap=0)
    remapped = remap_lines(chunks, [4, 6, 7, 10, 13])
    assert remapped[0].start_line == 4
    assert remapped[-1].end_line == 13
    assert all(c.start_line <= c.end_line for c in remapped)
    assert [c.text for c in remapped] == [c.text for c in chunks]
    assert remap_lines(chunks, None) == chunks


# -- CJK weighing and graphemes (test 28) -------------------------------------------------------


def test_cjk_text_makes_more_chunks_than_the_same_count_of_latin() -> None:
    cjk = "\n".join("你" * 20 for _ in range(20))
    latin = "\n".join("a" * 20 for _ in range(20))
    assert len(chunk_markdown(cjk, tokens=50, overlap=0)) > len(chunk_markdown(latin, tokens=50, overlap=0))


def test_chinese_chunk_holds_at_most_tokens_characters() -> None:
    content = "\n".join("你好世界再见朋友们" * 3 for _ in range(40))
    for tokens in (50, 100, 400):
        for c in chunk_markdown(content, tokens=tokens, overlap=tokens // 5):
            assert len(c.text.replace("\n", "")) <= tokens


def test_long_chinese_line_gives_many_chunks() -> None:
    chunks = chunk_markdown("中" * 2000, tokens=200, overlap=0)
    assert len(chunks) >= 8
    assert all(len(c.text) <= 200 for c in chunks)
    assert "".join(c.text for c in chunks) == "中" * 2000


def test_long_latin_line_is_not_weighed_as_cjk() -> None:
    assert len(chunk_markdown("a" * 2000, tokens=200, overlap=0)) <= 5


def test_astral_characters_are_never_split() -> None:
    # Python strings hold code points; a surrogate pair in UTF-16 is one character here, and
    # every piece must still encode to valid UTF-8 (no lone surrogate, no U+FFFD).
    line = "😀𠀀" * 700
    chunks = chunk_markdown(line, tokens=50, overlap=0)
    assert len(chunks) > 1
    for c in chunks:
        c.text.encode("utf-8")  # raises on a lone surrogate
        assert "\ufffd" not in c.text
    assert "".join(c.text for c in chunks) == line


@pytest.mark.parametrize(
    "grapheme",
    [
        "👨\u200d👩\u200d👧\u200d👦",  # ZWJ family (7 code points)
        "👍🏽",  # skin tone modifier
        "e\u0301\u0302",  # combining accents
        "❤\ufe0f",  # variation selector
        "🏴\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f",  # tag sequence (Scotland)
        "🇫🇷",  # regional-indicator flag
        "\u1112\u1161\u11ab",  # decomposed Hangul syllable (L V T jamo)
    ],
)
@pytest.mark.parametrize("prefix", ["", "a", "ab", "abc"])
def test_graphemes_are_never_split(grapheme: str, prefix: str) -> None:
    line = prefix + grapheme * 60
    chunks = chunk_markdown(line, tokens=10, overlap=0)
    assert len(chunks) > 1
    assert "".join(c.text for c in chunks) == line
    for c in chunks:
        body = c.text[len(prefix):] if c.text.startswith(prefix) and prefix else c.text
        assert len(body) % len(grapheme) == 0 and body == grapheme * (len(body) // len(grapheme)), (
            f"piece cut inside {grapheme!r}: {c.text!r}"
        )


# -- the embedding model's input limit (tests 38-41) ---------------------------------------------


def test_chunk_over_the_byte_limit_is_split_keeping_lines() -> None:
    text = "x" * 9000
    parent = Chunk(1, 1, text, hashlib.sha256(text.encode()).hexdigest())
    pieces = embedding_windows(parent, 8192)
    assert len(pieces) == 2
    assert all(len(p.text.encode("utf-8")) <= 8192 for p in pieces)
    assert "".join(p.text for p in pieces) == text
    assert all((p.start_line, p.end_line) == (1, 1) for p in pieces)
    assert all(p.hash == hashlib.sha256(p.text.encode()).hexdigest() for p in pieces)
    assert len({p.hash for p in pieces}) == 2


def test_byte_limit_split_never_cuts_a_multibyte_character() -> None:
    text = "😀é中" * 1500
    parent = Chunk(3, 9, text, hashlib.sha256(text.encode()).hexdigest())
    pieces = embedding_windows(parent, 1000)
    assert len(pieces) > 10
    for p in pieces:
        encoded = p.text.encode("utf-8")
        assert len(encoded) <= 1000
        assert "\ufffd" not in encoded.decode("utf-8")
        assert (p.start_line, p.end_line) == (3, 9)
    assert "".join(p.text for p in pieces) == text


def test_chunks_within_the_limit_are_untouched() -> None:
    chunks = chunk_markdown("hello\nworld\n" * 50, tokens=50, overlap=0)
    assert [w for c in chunks for w in embedding_windows(c, 8000)] == chunks


def test_local_models_without_a_declared_limit_get_2048_bytes() -> None:
    assert max_input_bytes("local", "some-model") == 2048
    assert max_input_bytes("gemini", "gemini-embedding-001") == 2048
    assert max_input_bytes("openai", "text-embedding-3-small") == 8192


def test_hard_cap_of_8000_bytes_wins_over_the_model_limit() -> None:
    emb = HashEmbedder()
    emb.max_input_bytes = 8192
    assert MAX_INPUT_BYTES == 8000
    assert emb.input_limit == 8000
    emb.max_input_bytes = 2048
    assert emb.input_limit == 2048


def test_weighted_length_of_every_chunk_within_the_limit() -> None:
    content = "\n".join(("mixed 中文 text テキスト 한국어 " * 4) for _ in range(60))
    for tokens in (8, 40, 400):
        limit = max(32, tokens * 4)
        for c in chunk_markdown(content, tokens=tokens, overlap=tokens // 4):
            assert weighted_length(c.text) <= limit
