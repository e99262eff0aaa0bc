"""Calibration of an embedder's cosine similarity: what "unrelated" looks like for this model.

Embedding models differ in their baseline: with all-MiniLM-L6-v2 unrelated texts score a cosine
near 0.1, with the e5 family near 0.75. A raw cosine therefore means nothing across models, and a
fixed ``min_score`` cannot tell "nothing relevant" from "a match". On its first hybrid search the
index embeds :data:`BACKGROUND_TEXTS` (short passages on everyday and technical topics, in English
and Chinese, unrelated to any one memory) with its own embedder, in one call, and keeps the vectors
in the index. At
query time the query's cosine to those passages is its null distribution: a chunk counts as
relevant to the extent that its cosine stands out above the 90th percentile of it
(:func:`background_level`, :func:`calibrated_cosine`). Pure maths, no model: the vectors come from the index.
"""

from __future__ import annotations

import math
from array import array
from typing import Any, Callable, Sequence

from .tuning import BACKGROUND_PERCENTILE, BLIND_MARGIN

#: Version of :data:`BACKGROUND_TEXTS`: the index re-embeds them when it changes.
BACKGROUND_VERSION = 1

#: Passages unrelated to one another and to any particular person's notes.
BACKGROUND_TEXTS: tuple[str, ...] = (
    "Knead the dough for ten minutes, then let it rise in a warm place until it doubles in size.",
    "Tomorrow will be cloudy in the morning with light rain in the afternoon and a high of 14 degrees.",
    "The home team scored twice in the second half and won the match three goals to one.",
    "Index funds track a market benchmark and usually charge lower fees than actively managed funds.",
    "Water tomato plants at the base in the early morning and mulch the soil to keep it moist.",
    "The treaty ended the war in 1648 and redrew the borders of several European states.",
    "A hash map gives constant average lookup time, but iteration order is not guaranteed.",
    "The night train leaves the central station at 22:10 and arrives at the coast after sunrise.",
    "The quartet played a slow ballad, and the pianist improvised a long solo over the chords.",
    "Take one tablet twice a day with food and do not exceed the stated dose.",
    "If the engine light comes on, check the oil level and the tyre pressure before a long drive.",
    "Jupiter is the largest planet in the solar system and has dozens of known moons.",
    "Please submit the expense report with receipts attached by the last working day of the month.",
    "The museum is closed on Mondays; guided tours start every hour from the main entrance.",
    "Cats sleep for most of the day and are most active at dawn and dusk.",
    "Sand the wooden surface lightly before applying a second coat of varnish.",
    "The library extended its opening hours during the exam period.",
    "Photosynthesis converts light energy, water and carbon dioxide into glucose and oxygen.",
    "Our flight was delayed by two hours because of fog at the departure airport.",
    "The recipe calls for two cups of flour, one egg, a pinch of salt and warm milk.",
    "Regular stretching before running lowers the risk of muscle injuries.",
    "The novel follows three generations of a family living on a remote island.",
    "Replace the air filter every twelve months or after fifteen thousand kilometres.",
    "The city council approved a new bicycle lane along the river.",
    "把面团揉十分钟，然后放在温暖的地方发酵，直到体积变成两倍。",
    "明天上午多云，下午有小雨，最高气温十四度。",
    "主队在下半场打进两球，最终以三比一赢得比赛。",
    "指数基金跟踪市场基准，费用通常比主动管理型基金低。",
    "清晨给番茄浇水，并在土壤表面覆盖一层稻草保持湿润。",
    "这座古城的城墙建于明代，至今保存完好。",
    "哈希表的平均查找时间是常数，但遍历顺序没有保证。",
    "夜班火车晚上十点十分从中央车站出发，日出后到达海边。",
    "乐队演奏了一首慢歌，钢琴手在和弦上即兴独奏了很久。",
    "每天两次，每次一片，饭后服用，不要超过规定剂量。",
    "如果发动机故障灯亮了，长途驾驶前请检查机油和胎压。",
    "木星是太阳系中最大的行星，拥有几十颗已知的卫星。",
    "请在本月最后一个工作日之前提交报销单并附上发票。",
    "博物馆周一闭馆，导览每小时从正门出发一次。",
    "猫一天中大部分时间都在睡觉，黎明和黄昏时最活跃。",
    "刷第二遍清漆之前，先把木头表面轻轻打磨一遍。",
    "考试期间图书馆延长了开放时间。",
    "光合作用把光能、水和二氧化碳转化为葡萄糖和氧气。",
    "因为出发机场有雾，我们的航班延误了两个小时。",
    "这道菜需要两杯面粉、一个鸡蛋、一小撮盐和温牛奶。",
    "跑步前做拉伸运动可以降低肌肉受伤的风险。",
    "这部小说讲述了一个家族三代人在偏远小岛上的生活。",
    "空气滤清器每十二个月或每行驶一万五千公里更换一次。",
    "市议会批准沿河修建一条新的自行车道。",
)


def background_level(query_to_background: Sequence[float], percentile: float = BACKGROUND_PERCENTILE) -> float:
    """The cosine unrelated text reaches for this query: the ``percentile`` (linear interpolation)
    of its cosines to the background passages (``nan`` when there are none)."""
    return _percentile(query_to_background, percentile)


def best_of_level(query_to_background: Sequence[float], draws: int, percentile: float = BACKGROUND_PERCENTILE) -> float:
    """The level the best of ``draws`` unrelated texts reaches for this query, as
    :func:`background_level` is that of one: a chunk embedded as several windows scores its best
    window, so by chance alone it clears the one-text level more often. The best of ``n``
    independent draws stays below the level ``q`` with probability ``q ** n``; this is the
    percentile ``100 * (percentile / 100) ** (1 / draws)`` of the query's cosines to the passages."""
    n = max(1, int(draws))
    p = max(0.0, min(100.0, percentile)) / 100.0
    return _percentile(query_to_background, 100.0 * p ** (1.0 / n))


def _percentile(values: Sequence[float], percentile: float) -> float:
    vals = sorted(c for c in values if math.isfinite(c))
    if not vals:
        return math.nan
    pos = (len(vals) - 1) * max(0.0, min(100.0, percentile)) / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(vals) - 1)
    return vals[lo] + (vals[hi] - vals[lo]) * (pos - lo)


#: The highest level a cosine is calibrated against (a level of 1 would divide by zero).
_LEVEL_CAP = 0.999


def calibrated_cosine(cosine: float, level: float) -> float:
    """``(cos - level) / (1 - level)`` clipped to [0, 1]: 0 for a chunk no closer to the query than
    an unrelated passage, 1 for an identical text. Without a level (``nan``) the raw cosine,
    clipped."""
    if not math.isfinite(cosine):
        return 0.0
    if not math.isfinite(level):
        return max(0.0, min(1.0, cosine))
    level = min(level, _LEVEL_CAP)
    return max(0.0, min(1.0, (cosine - level) / (1.0 - level)))


def calibrated_cosines(cosines: Sequence[float], level: float) -> list[float]:
    """:func:`calibrated_cosine` of each of ``cosines`` against one ``level`` (the same arithmetic,
    checked once)."""
    isfinite = math.isfinite
    if not isfinite(level):
        return [max(0.0, min(1.0, c)) if isfinite(c) else 0.0 for c in cosines]
    level = min(level, _LEVEL_CAP)
    span = 1.0 - level
    return [max(0.0, min(1.0, (c - level) / span)) if isfinite(c) else 0.0 for c in cosines]


_MEMO: dict[tuple[str, int], tuple[Sequence[Sequence[float]], Any]] = {}


def _per_background(kind: str, background: Sequence[Sequence[float]], derive: Callable[[Sequence[Sequence[float]]], Any]) -> Any:
    """``derive(background)``, computed once per background object (the vectors are read, never
    changed) and per ``kind`` of derivation."""
    key = (kind, id(background))
    cached = _MEMO.get(key)
    if cached is not None and cached[0] is background:
        return cached[1]
    value = derive(background)
    if len(_MEMO) >= 48:
        _MEMO.clear()
    _MEMO[key] = (background, value)
    return value


def _unit_matrix(background: Sequence[Sequence[float]]) -> Any:
    """``background`` as a float64 matrix of unit rows (a zero row stays zero; shorter rows are
    padded with zeros), built once per background object."""
    return _per_background("units", background, _build_unit_matrix)


def _build_unit_matrix(background: Sequence[Sequence[float]]) -> Any:
    import numpy as np

    width = max((len(v) for v in background), default=0)
    matrix = np.zeros((len(background), width), dtype=np.float64)
    for row, v in zip(matrix, background):
        row[: len(v)] = v
    with np.errstate(invalid="ignore", over="ignore"):
        norms = np.sqrt(np.einsum("ij,ij->i", matrix, matrix))
        norms[norms == 0] = 1.0
        matrix /= norms[:, None]
    return matrix


def background_cosines(query: Sequence[float], background: Sequence[Sequence[float]]) -> list[float]:
    """The cosine of ``query`` to each background vector, in order: 0 where either is a zero
    vector, ``nan`` where either holds a non-finite value. One matrix-vector product over unit
    vectors kept per ``background`` object (a search runs this on every hybrid query; the
    background holds 48 vectors of up to thousands of dimensions). Dimensions beyond the shorter
    of the two vectors count as zeros."""
    if not background:
        return []
    import numpy as np

    units = _unit_matrix(background)
    q = np.asarray(query, dtype=np.float64).ravel()
    with np.errstate(invalid="ignore", over="ignore"):
        norm = math.sqrt(float(np.dot(q, q)))
        if norm == 0:
            return [0.0] * len(background)
        width = units.shape[1]
        if q.shape[0] != width:
            q = np.pad(q[:width], (0, max(0, width - q.shape[0])))
        return (units @ q / norm).tolist()  # type: ignore[no-any-return]


#: :data:`BACKGROUND_TEXTS` holds this many English passages first, then as many Chinese ones.
BACKGROUND_LATIN = 24

def _mean_pairwise_cosine(vectors: Sequence[Sequence[float]]) -> float:
    """Mean cosine over the distinct pairs of ``vectors``: ``(|sum of unit vectors|^2 - n) / (n(n-1))``."""
    units = []
    for v in vectors:
        norm = math.sqrt(sum(x * x for x in v))
        if norm > 0 and math.isfinite(norm):
            units.append([x / norm for x in v])
    n = len(units)
    if n < 2:
        return math.nan
    total = [sum(col) for col in zip(*units)]
    return (sum(x * x for x in total) - n) / (n * (n - 1))


def blind_scripts(background: Sequence[Sequence[float]]) -> frozenset[str]:
    """The scripts (``"latin"``, ``"cjk"``) the embedder cannot tell texts apart in, judged from its
    vectors of :data:`BACKGROUND_TEXTS`: an English-only model such as all-MiniLM-L6-v2 maps
    unrelated Chinese passages to nearly the same vector (mean pairwise cosine 0.59, against 0.05
    for the English ones). Its cosine then says nothing about a Chinese query, so the vector side
    neither confirms nor vetoes one (:func:`clawmem_core.search.query_confidence`)."""
    return _per_background("blind", background, _blind_scripts)  # type: ignore[no-any-return]


def _blind_scripts(background: Sequence[Sequence[float]]) -> frozenset[str]:
    if len(background) != len(BACKGROUND_TEXTS):
        return frozenset()
    latin = _mean_pairwise_cosine(background[:BACKGROUND_LATIN])
    cjk = _mean_pairwise_cosine(background[BACKGROUND_LATIN:])
    if not (math.isfinite(latin) and math.isfinite(cjk)):
        return frozenset()
    return frozenset(name for name, a, b in (("latin", latin, cjk), ("cjk", cjk, latin)) if a - b > BLIND_MARGIN)


#: Pairs of :data:`BACKGROUND_TEXTS` (English index, Chinese index) that say the same thing.
TRANSLATED_PAIRS: tuple[tuple[int, int], ...] = tuple((i, BACKGROUND_LATIN + i) for i in range(BACKGROUND_LATIN) if i != 5)

def translation_strength(background: Sequence[Sequence[float]]) -> float:
    """How far above unrelated text the embedder places a passage that says the same thing in other
    words, judged from its vectors of :data:`BACKGROUND_TEXTS`, whose English and Chinese passages
    are translations of each other (:data:`TRANSLATED_PAIRS`): the median over the pairs of the
    calibrated cosine (:func:`calibrated_cosine`) of an English passage to its translation, against
    the level (:func:`background_level`) of its cosines to the other Chinese passages. No word is
    shared, so only meaning can place them together: multilingual-e5-small about 0.38,
    all-MiniLM-L6-v2 about 0 (it is blind to Chinese), a hashed bag of words below 0. ``0.0``
    when the vectors are not those of :data:`BACKGROUND_TEXTS`."""
    return _per_background("translation", background, _translation_strength)  # type: ignore[no-any-return]


def _translation_strength(background: Sequence[Sequence[float]]) -> float:
    if len(background) != len(BACKGROUND_TEXTS):
        return 0.0
    # zero or non-finite vectors say nothing: left out of the pairs and of the levels
    usable = [any(x != 0 for x in v) and all(math.isfinite(x) for x in v) for v in background]
    zh = [j for j in range(BACKGROUND_LATIN, len(BACKGROUND_TEXTS)) if usable[j]]
    scores = []
    for en, twin in TRANSLATED_PAIRS:
        if not (usable[en] and usable[twin]):
            continue
        cos = background_cosines(background[en], background)
        level = background_level([cos[j] for j in zh if j != twin])
        scores.append(calibrated_cosine(cos[twin], level) if math.isfinite(level) else 0.0)
    return _percentile(scores, 50.0) if scores else 0.0


def encode_vectors(vectors: Sequence[Sequence[float]]) -> str:
    """Vectors as text (float32, base64), one line each, to keep in the index."""
    import base64

    return "\n".join(base64.b64encode(array("f", v).tobytes()).decode("ascii") for v in vectors)


def decode_vectors(text: str) -> list[list[float]]:
    """The inverse of :func:`encode_vectors`."""
    import base64

    out = []
    for line in text.splitlines():
        a = array("f")
        a.frombytes(base64.b64decode(line))
        out.append(a.tolist())
    return out
