"""Tokenisation: query terms, index terms, CJK weighing, MMR similarity tokens (SPEC 3, 6)."""

from __future__ import annotations

import apsw
import pytest

from hypothesis import given, settings
from hypothesis import strategies as st

from clawmem_core.text import (
    index_document,
    index_terms,
    openclaw_tokens,
    quote_fts,
    search_terms,
    similarity_tokens,
    weighted_length,
    wide_count,
)


# -- OpenClaw's FTS query tokens (reference test 1) ---------------------------------------------


def test_openclaw_tokens_split_on_letters_digits_underscore() -> None:
    assert openclaw_tokens("hello world") == ["hello", "world"]
    assert openclaw_tokens("FOO_bar baz-1") == ["FOO_bar", "baz", "1"]


def test_openclaw_tokens_keep_a_cjk_run_whole() -> None:
    assert openclaw_tokens("金银价格") == ["金银价格"]
    assert openclaw_tokens("価格 2026年") == ["価格", "2026年"]


@pytest.mark.parametrize("blank", ["", "   ", "\t\n", "--- !!! ..."])
def test_blank_or_punctuation_query_has_no_terms(blank: str) -> None:
    assert openclaw_tokens(blank) == []
    assert search_terms(blank) == []


def test_search_terms_are_the_query_words_lower_cased() -> None:
    # clawmem ORs quoted terms (SPEC 6 [beyond]); the terms themselves follow OpenClaw's split.
    assert search_terms("FOO_bar baz-1") == ["foo_bar", "baz", "1"]


def test_search_terms_deduplicate_in_order() -> None:
    assert search_terms("deploy Deploy DEPLOY kubernetes deploy") == ["deploy", "kubernetes"]


def test_search_terms_drop_stopwords_unless_nothing_else_is_left() -> None:
    assert search_terms("what is the deploy plan") == ["deploy", "plan"]
    assert search_terms("the") == ["the"]
    assert search_terms("what is the deploy plan", stopwords=False) == ["what", "is", "the", "deploy", "plan"]


def test_cjk_query_terms_are_characters_and_pairs() -> None:
    assert search_terms("成语") == ["成", "语", "成语"]
    terms = search_terms("金银价格")
    assert {"金银", "银价", "价格"} <= set(terms)
    assert "金银价格" not in terms  # the whole run is not a term: substrings must match


def test_chinese_question_words_are_dropped_and_pairs_do_not_span_them() -> None:
    # 什么 and the rare pair 了什 (了 + 什么) would match chunks that share only the question form.
    assert search_terms("Caroline研究了什么？") == ["caroline", "研", "究", "研究", "究了"]
    terms = search_terms("Melanie打算什么时候去露营？")
    assert "露营" in terms and "打算" in terms
    assert not {"什么", "么时", "时候", "算什", "候去"} & set(terms)
    terms = search_terms("哪些符号很重要？")
    assert "符号" in terms and not {"哪些", "些", "些符"} & set(terms)
    terms = search_terms("為什麼沒來")  # traditional forms too
    assert terms == ["沒", "來", "沒來"]
    assert search_terms("他何时搬家") == ["搬", "家", "搬家"]


def test_a_query_of_question_words_only_keeps_them() -> None:
    assert search_terms("什么") == ["什", "么", "什么"]
    assert search_terms("什么", stopwords=False) == ["什", "么", "什么"]


def test_ambiguous_function_characters_keep_their_pairs() -> None:
    # 会 and 的 are function words on their own but also parts of words (大会, 目的).
    terms = search_terms("去参加大会的目的")
    assert {"大会", "目的"} <= set(terms)
    assert "的" not in terms


def test_japanese_and_korean_queries_keep_their_pairs() -> None:
    assert {"しり", "りと", "とり"} <= set(search_terms("しりとり"))
    assert {"끝말", "잇기"} <= set(search_terms("끝말잇기 뭐야"))


def test_mixed_script_word_splits_cjk_from_latin() -> None:
    terms = index_terms("2026年价格")
    assert "2026" in terms and "年" in terms and "价格" in terms


def test_index_terms_make_substrings_of_a_cjk_run_searchable() -> None:
    terms = set(index_terms("今天玩成语接龙游戏"))
    assert "成语" in terms and "接龙" in terms and "游戏" in terms
    kana = set(index_terms("しりとりをしました"))
    assert {"しり", "りと", "とり"} <= kana
    hangul = set(index_terms("끝말잇기"))
    assert "끝말" in hangul


def test_index_document_leaves_ascii_to_the_fts_tokenizer() -> None:
    # FTS5's unicode61 tokenizer folds case and splits words; only CJK runs are rewritten.
    assert index_document("Deploy THE Service") == "Deploy THE Service"
    assert index_document("Deploy 成语") == "Deploy  成 语 成语 "


def test_fullwidth_letters_and_digits_are_indexed_and_searched_as_ascii() -> None:
    # CJK input methods type ＬＧＢＴＱ and ２０２３; they must meet LGBTQ and 2023.
    assert index_terms("去了ＬＧＢＴＱ大会，２０２３年") == index_terms("去了LGBTQ大会,2023年")
    assert {"lgbtq", "2023", "大会"} <= set(index_terms("去了ＬＧＢＴＱ大会，２０２３年"))
    assert index_document("ＡＢＣ") == "ABC"
    assert search_terms("ＬＧＢＴＱ　２０２３") == ["lgbtq", "2023"]
    assert search_terms("Ｄｅｐｌｏｙ plan") == ["deploy", "plan"]


def _reference_index_document(text: str) -> str:
    """The straightforward implementation of ``index_document`` (one regex callback per wide run,
    after folding fullwidth forms): the faster one must write exactly the same text."""
    import re

    from clawmem_core.text import _WIDE_RE, _WIDE_RUN_RE, _WORD_RE, fold_width

    def expand(match: re.Match[str]) -> str:
        parts = []
        for run in _WORD_RE.findall(match.group(0)):
            parts.append(" ".join(run))
            if len(run) > 1:
                parts.append(" ".join(map(str.__add__, run[:-1], run[1:])))
        return " " + " ".join(parts) + " "

    if text.isascii() or not _WIDE_RE.search(text):
        return text
    return _WIDE_RUN_RE.sub(expand, fold_width(text))


def test_index_document_of_long_cjk_runs() -> None:
    # Runs of 8 or more characters take the array path; 𠀀 is outside the BMP.
    assert index_document("成语接龙游戏很好玩") == " 成 语 接 龙 游 戏 很 好 玩 成语 语接 接龙 龙游 游戏 戏很 很好 好玩 "
    assert index_document("a𠀀𠀁中文中文中文中b") == "a 𠀀 𠀁 中 文 中 文 中 文 中 𠀀𠀁 𠀁中 中文 文中 中文 文中 中文 文中 b"


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab Z_9 .,、。「」中文成语接龙しりとり끝말잇기ＡＢ１\n-é𠀀·")), max_size=200))
def test_index_document_matches_the_reference(text: str) -> None:
    assert index_document(text) == _reference_index_document(text)


def test_index_document_matches_the_reference_on_long_runs() -> None:
    import random

    rng = random.Random(7)
    alphabet = list("中文成语接龙游戏しりとり끝말잇기ＡＢ１𠀀") + list("，。、 ab1·")
    for _ in range(300):
        text = "".join(rng.choice(alphabet) if rng.random() < 0.1 else rng.choice(alphabet[:20])
                       for _ in range(rng.randrange(0, 120)))
        assert index_document(text) == _reference_index_document(text)


# -- quoting ----------------------------------------------------------------------------------


@pytest.mark.parametrize("term", ['a"b', '"', 'NEAR(x', "AND", "*", "^x", "col:x", "-x", "(x)"])
def test_quoted_terms_are_never_fts5_syntax(term: str) -> None:
    conn = apsw.Connection(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(text)")
    conn.execute("INSERT INTO t(text) VALUES ('x and a b col')")
    # Would raise apsw.SQLError if the quoted term were parsed as syntax.
    conn.execute("SELECT rowid FROM t WHERE t MATCH ?", (quote_fts(term),)).fetchall()
    assert quote_fts(term).startswith('"') and quote_fts(term).endswith('"')


def test_quote_doubles_inner_quotes() -> None:
    assert quote_fts('say "hi"') == '"say ""hi"""'


# -- CJK weighing -----------------------------------------------------------------------------


def test_cjk_characters_weigh_one_token_each() -> None:
    assert weighted_length("abcd") == 4
    assert wide_count("abcd") == 0
    assert weighted_length("中文") == 8
    assert wide_count("中文") == 2
    assert weighted_length("かな한글") == 16
    assert weighted_length("a中") == 5


# -- MMR similarity tokens (reference test 12) -------------------------------------------------


def test_similarity_tokens_words_lower_cased_and_unique() -> None:
    assert similarity_tokens("Hello World 123") == {"hello", "world", "123"}
    assert similarity_tokens("hello hello HELLO") == {"hello"}
    assert similarity_tokens("snake_case stays") == {"snake_case", "stays"}


def test_similarity_tokens_of_empty_or_punctuation_are_empty() -> None:
    assert similarity_tokens("") == set()
    assert similarity_tokens("!@#$%^&*()") == set()


def test_similarity_tokens_include_cjk_unigrams_and_bigrams() -> None:
    assert similarity_tokens("今天讨论") == {"今", "天", "讨", "论", "今天", "天讨", "讨论"}


def test_similarity_tokens_no_bigram_across_latin() -> None:
    tokens = similarity_tokens("我a好")
    assert "我好" not in tokens
    assert {"我", "好", "a"} <= tokens


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab Z_9 .,、。「」中文成语接龙しりとり끝말잇기ＡＢ１\n-é")), max_size=60))
def test_fts_document_holds_the_query_side_terms(text: str) -> None:
    # The FTS5 document is tokenised by unicode61 (words, lower-cased); its terms must be exactly
    # the terms queries are built from, or a query term could miss its own text.
    import re

    doc_terms = [w.lower() for w in re.findall(r"\w+", index_document(text))]
    assert doc_terms == index_terms(text)


def test_expansion_cache_stays_bounded_and_correct() -> None:
    from clawmem_core import text

    runs = [chr(0x4E00 + i) + chr(0x4E00 + i // 7) + "中" for i in range(text._PIECES_MAX + 50)]
    for run in runs:
        assert index_document(run) == _reference_index_document(run)
    assert 0 < len(text._PIECES) <= text._PIECES_MAX
    assert index_document(runs[0]) == _reference_index_document(runs[0])


def test_is_narrow_only_below_u0100() -> None:
    from clawmem_core.text import is_narrow

    assert is_narrow("") and is_narrow("abc") and is_narrow("17:23 · café ñ ÿ")
    assert not is_narrow("a—b")  # U+2014: not wide, but not narrow either
    assert not is_narrow("中") and not is_narrow("\U00020000") and not is_narrow("\ud800")
    assert index_document("## 17:23 · Standup") == "## 17:23 · Standup"
