"""Tokenisation shared by chunk weighing, the keyword index, queries and MMR.

CJK lives here, once. Chinese, Japanese and Korean text has no spaces between words, so a run of
CJK characters is turned into overlapping two-character terms (and one-character terms), the
classic CJK bigram analysis: ``成语`` then matches inside ``今天玩成语接龙游戏``.
"""

from __future__ import annotations

import re
import sys
from array import array

# Characters that weigh as one token each and are split into n-grams: CJK ideographs (with
# extensions and compatibility forms), kana, Hangul, Yi, CJK punctuation and fullwidth forms.
_WIDE_RANGES = (
    "\u1100-\u11ff"  # Hangul Jamo
    "\u2e80-\u2fdf"  # CJK radicals, Kangxi
    "\u3000-\u303f"  # CJK symbols and punctuation
    "\u3040-\u30ff"  # Hiragana, Katakana
    "\u3100-\u31ff"  # Bopomofo, Hangul compatibility Jamo, Katakana ext
    "\u3200-\u4dbf"  # enclosed CJK, CJK ext A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\ua000-\ua4cf"  # Yi
    "\ua960-\ua97f"  # Hangul Jamo ext A
    "\uac00-\ud7ff"  # Hangul syllables, Jamo ext B
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\ufe30-\ufe4f"  # CJK compatibility forms
    "\uff00-\uffef"  # halfwidth and fullwidth forms
    "\U00020000-\U0003134f"  # CJK ext B-H
)
_WIDE_RE = re.compile(f"[{_WIDE_RANGES}]")
# A "CJK letter": a wide character that is a word character (not punctuation).
_CJK_LETTER = f"[{_WIDE_RANGES}]"
_WORD_RE = re.compile(r"\w+")
_SPLIT_CJK_RE = re.compile(f"({_CJK_LETTER}+)")
_CJK_RUN_RE = re.compile(f"^{_CJK_LETTER}+$")
# Runs of wide characters (letters and punctuation); the letters are picked out of each run.
_WIDE_RUN_RE = re.compile(f"[{_WIDE_RANGES}]+")
_WIDE_SPLIT_RE = re.compile(f"([{_WIDE_RANGES}]+)")
# Code points as machine integers: long CJK runs are expanded with array slices, not per character.
_UTF32 = "utf-32-le" if sys.byteorder == "little" else "utf-32-be"
_SPACE = array("I", [32])
_ARRAY_FROM = 8 if _SPACE.itemsize == 4 else 1 << 62  # shorter runs are cheaper with str.join
# Short runs recur (words between punctuation): their expansions are kept, up to a bound.
_PIECES: dict[str, str] = {}
_PIECES_MAX = 16384

#: Version of the terms :func:`index_document` writes to the keyword index. It is part of the index
#: identity: an index written with another version is rebuilt in full, never mixed with new terms.
#: 2: fullwidth letters and digits (``ＡＢＣ１２３``, typed by CJK input methods) are indexed as ASCII.
FTS_FORMAT = 2
# Runs of fullwidth digits and Latin letters, and the map to their ASCII forms.
_FULLWIDTH_RE = re.compile("[\uff10-\uff19\uff21-\uff3a\uff41-\uff5a]+")
_FULLWIDTH_TO_ASCII = str.maketrans({chr(c): chr(c - 0xFEE0) for c in range(0xFF01, 0xFF5F)})

#: Function words that carry no meaning in a query. They are dropped from keyword queries
#: (unless nothing else is left), which keeps OR-queries fast on large indexes.
STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further had
    has have having he her here hers herself him himself his how i if in into is it its itself just
    me more most my myself no nor not now of off on once only or other our ours ourselves out over own
    same she should so some such than that the their theirs them themselves then there these they
    this those through to too under until up very was we were what when where which while who whom
    why will with would you your yours yourself yourselves s t don did didn doesn isn wasn weren
    won wouldn shouldn couldn ll re ve d m o y
    的 了 吗 呢 吧 啊 么 是 在 和 与 及 或 也 都 就 而 着 过 被 把 这 那 哪 什 么 个 之 其 我 你 他 她 它 们
    嗎 麼 與 這 過 個 們""".split()
)

#: Chinese question words and particles (simplified and traditional). A query's CJK run is cut at
#: them, longest first: they are dropped, and no character pair spans them (``研究了什么`` gives
#: no ``了什``, a rare pair that would rank chunks by noise). Single characters in this list only
#: ever occur as question words; ambiguous function characters (``的 了 是 会``, also parts of
#: words such as ``目的 了解 还是 大会``) stay in their pairs and are only dropped as characters.
QUERY_BREAKS = frozenset(
    """什么时候 什么样 什么 为什么 怎么样 怎么 怎样 如何 哪里 哪儿 哪些 哪个 哪种 哪位 是否 是不是 有没有 多少
    何时 何处 为何 几时 什麼時候 什麼樣 什麼 為什麼 怎麼樣 怎麼 哪裡 哪個 哪種 何時 為何 幾時
    哪 谁 誰 吗 嗎 呢 吧 么 麼 啊""".split()
)
_BREAK_LENGTHS = sorted({len(w) for w in QUERY_BREAKS}, reverse=True)


def _to_ascii(match: re.Match[str]) -> str:
    return match.group(0).translate(_FULLWIDTH_TO_ASCII)


def fold_width(text: str) -> str:
    """``text`` with fullwidth digits and Latin letters as their ASCII forms (fullwidth
    punctuation separates words either way and is left alone)."""
    return text if text.isascii() else _FULLWIDTH_RE.sub(_to_ascii, text)


def encodes(text: str, encoding: str) -> bool:
    """True when ``text`` can be written in ``encoding`` (strict: no character is replaced)."""
    try:
        text.encode(encoding)
    except UnicodeEncodeError:
        return False
    return True


def is_narrow(text: str) -> bool:
    """True when no character of ``text`` can be wide: all are below U+0100 (such a string is
    stored one byte per character, so the Latin-1 check is a copy, not a scan)."""
    return encodes(text, "latin-1")


def wide_count(text: str) -> int:
    """Number of characters that weigh as a whole token (CJK and other wide characters)."""
    if text.isascii():
        return 0
    return sum(map(len, _WIDE_RUN_RE.findall(text)))


def weighted_length(text: str) -> int:
    """Length in "character units": 4 units make a token; a CJK character is a token on its own."""
    return len(text) + 3 * wide_count(text)


def char_weight(ch: str) -> int:
    return 4 if _WIDE_RE.match(ch) else 1


def _cjk_terms(run: str) -> list[str]:
    if len(run) == 1:
        return [run]
    return list(run) + [run[i : i + 2] for i in range(len(run) - 1)]


def _terms(text: str, breaks: bool) -> list[str]:
    out: list[str] = []
    for word in _WORD_RE.findall(fold_width(text).lower()):
        if word.isascii():
            out.append(word)
            continue
        for part in _SPLIT_CJK_RE.split(word):
            if not part:
                continue
            if not _CJK_RUN_RE.match(part):
                out.append(part)
            elif breaks:
                for seg in _query_segments(part):
                    out.extend(_cjk_terms(seg))
            else:
                out.extend(_cjk_terms(part))
    return out


def index_terms(text: str) -> list[str]:
    """Terms written to the keyword index for ``text``: lower-cased words, and for each CJK run
    its characters and its overlapping character pairs (fullwidth forms folded to ASCII first)."""
    return _terms(text, breaks=False)


def _cjk_piece(run: str) -> str:
    """``" ".join(_cjk_terms(run))``: the characters of a CJK letter run, then its pairs."""
    piece = _PIECES.get(run)
    if piece is not None:
        return piece
    n = len(run)
    if n == 1:
        return run
    if n < _ARRAY_FROM:
        piece = f"{' '.join(run)} {' '.join(map(str.__add__, run, run[1:]))}"
        if len(_PIECES) >= _PIECES_MAX:
            _PIECES.clear()
        _PIECES[run] = piece
        return piece
    # "a b c ab bc": 2n - 1 code points of characters and spaces, then 3(n - 1) - 1 of pairs.
    src = array("I", run.encode(_UTF32))
    out = _SPACE * (5 * n - 4)
    out[0 : 2 * n : 2] = src
    out[2 * n :: 3] = src[:-1]
    out[2 * n + 1 :: 3] = src[1:]
    return str(out, _UTF32)


def index_document(text: str) -> str:
    """The text stored in the FTS5 table: the text itself, with each CJK run replaced by its
    characters and character pairs (FTS5's tokenizer then finds the same terms as
    :func:`index_terms`: words, lower-cased, and the CJK terms)."""
    if text.isascii() or is_narrow(text) or not _WIDE_RE.search(text):
        return text
    # Odd items are runs of wide characters; each becomes " <terms of its letter runs> ".
    parts = _WIDE_SPLIT_RE.split(fold_width(text))
    for i in range(1, len(parts), 2):
        parts[i] = f" {' '.join(map(_cjk_piece, _WORD_RE.findall(parts[i])))} "
    return "".join(parts)


def _query_segments(run: str) -> list[str]:
    """The pieces of a CJK run between its :data:`QUERY_BREAKS` (longest match first)."""
    out: list[str] = []
    start = i = 0
    while i < len(run):
        size = next((n for n in _BREAK_LENGTHS if run[i : i + n] in QUERY_BREAKS), 0)
        if size:
            if start < i:
                out.append(run[start:i])
            i += size
            start = i
        else:
            i += 1
    if start < len(run):
        out.append(run[start:])
    return out


def search_terms(text: str, stopwords: bool = True) -> list[str]:
    """Terms of a query, deduplicated, in order: the same terms as :func:`index_terms` (words,
    CJK characters and character pairs). With ``stopwords`` true, function words are dropped and
    CJK runs are cut at question words (:data:`QUERY_BREAKS`), unless the query has nothing else."""
    if stopwords:
        kept = [t for t in dict.fromkeys(_terms(text, breaks=True)) if t not in STOPWORDS]
        if kept:
            return kept
    return list(dict.fromkeys(index_terms(text)))


def openclaw_tokens(text: str) -> list[str]:
    """OpenClaw's query tokens: runs of letters, digits and ``_`` (a CJK run stays whole)."""
    return [t for t in _WORD_RE.findall(text) if t.strip()]


def similarity_tokens(text: str) -> set[str]:
    """Tokens for MMR's Jaccard similarity: lower-cased words plus CJK unigrams and bigrams."""
    return set(index_terms(text))


def quote_fts(term: str) -> str:
    """Quote a term for an FTS5 MATCH expression (``"`` doubled), so no term is FTS5 syntax."""
    return '"' + term.replace('"', '""') + '"'
