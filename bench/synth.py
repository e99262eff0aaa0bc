"""Synthetic agent workspaces: realistic Markdown memory (daily notes, session archives, topic notes and a
MEMORY.md), in English and Chinese, deterministic for a seed, sized to about N chunks.

The vocabulary mixes common words with a long tail of names, code names, ticket ids, hosts and numbers, so the
keyword index sees a realistic term distribution. Chunk counts are estimated the way clawmem chunks (1,600
characters, 320 of overlap, a CJK character weighing four); the index reports the exact number.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import random
import shutil
from dataclasses import dataclass
from pathlib import Path

EN_PEOPLE = (
    "Alice Bob Carol Dave Erin Frank Grace Heidi Ivan Judy Mallory Niaj Olivia Peggy Rupert Sybil Trent Victor "
    "Walter Yuki Zara Omar Priya Lena Marco Sofia Kenji Amara Tomas Hana Diego Ines Felix Nadia Oscar Rosa"
).split()
EN_TOPICS = (
    "billing migration;search latency;onboarding flow;mobile release;data retention policy;quarterly roadmap;"
    "hiring plan;incident review;pricing page;API rate limits;vector index;backup schedule;design system;"
    "customer interviews;SSO integration;dark mode;accessibility audit;load testing;cost dashboard;"
    "privacy review;release notes;feature flags;CI pipeline;memory leak;offline sync;translation workflow;"
    "analytics events;email digest;support macros;database upgrade;cache invalidation;webhook retries"
).split(";")
EN_ACTIONS = (
    "ship the first draft;write the migration script;split the ticket;book a follow-up call;benchmark the new "
    "index;roll back the change;move the deadline;ask legal for a review;pair on the refactor;update the runbook;"
    "file a bug upstream;reduce the batch size;add a retry with backoff;clean up the old branches;"
    "send the summary to the team;prepare the demo;check the error budget;try the smaller model;"
    "archive the old dashboards;rotate the API keys;document the decision"
).split(";")
EN_PREFS = (
    "short standups;written proposals over meetings;tea, not coffee;dark roast coffee;async reviews;"
    "Vim keybindings;morning focus blocks;Python type hints everywhere;jazz while coding;small pull requests;"
    "Thai food on Fridays;hiking on weekends;no meetings on Wednesday;tabs over spaces;long walks after lunch"
).split(";")
EN_PLACES = "Berlin;Lisbon;Tokyo;Austin;Nairobi;Toronto;Seoul;the lake house;the office;Shenzhen;Oslo".split(";")
EN_COMMON = (
    "the a to and of in we for on it is that with was this be as at by from but not have are will about "
    "after before today tomorrow yesterday again still maybe probably need needs want wants said says think "
    "thinks agreed decided noticed found fixed broke looked checked tried moved added removed changed kept "
    "works worked slow fast better worse small large new old first last next later soon early late quick "
    "good bad fine clear unclear team user users customer customers service server client database query "
    "queries index file files note notes issue issues review meeting call plan plans idea ideas test tests "
    "error errors result results number numbers week month day hour minute morning evening night week's "
    "release version branch commit deploy config setting settings budget risk risks question answer "
    "because although while since until unless whether however also only just even really quite very "
    "more less most least some many few every each other another same different own enough several"
).split()
SLUGS = "standup retro planning one-on-one demo incident interview offsite review kickoff debug pairing".split()

ZH_PEOPLE = "张伟 王芳 李娜 刘洋 陈静 杨帆 赵磊 黄敏 周杰 吴昊 徐丽 孙强 马超 朱婷 胡斌 郭佳".split()
ZH_TOPICS = (
    "账单迁移 搜索延迟 新用户引导 移动端发布 数据保留策略 季度路线图 招聘计划 故障复盘 定价页面 接口限流 向量索引 "
    "备份计划 设计规范 客户访谈 单点登录 深色模式 无障碍审查 压力测试 成本看板 隐私评估 发布说明 功能开关 持续集成 "
    "内存泄漏 离线同步 翻译流程 埋点事件 邮件摘要 数据库升级 缓存失效"
).split()
ZH_ACTIONS = (
    "先交第一版草稿 写迁移脚本 拆分任务 约下次电话 测一下新索引 回滚这个改动 推迟截止日期 请法务审核 一起重构 "
    "更新运维手册 给上游提缺陷 减小批量大小 加上指数退避重试 清理旧分支 把总结发给团队 准备演示 检查错误预算 "
    "试试更小的模型 归档旧看板 轮换密钥 记录这个决定"
).split()
ZH_PREFS = (
    "简短的站会 书面方案而不是开会 喝茶不喝咖啡 异步评审 上午专注时间 小的合并请求 周末去爬山 周三不开会 "
    "午饭后散步 写代码时听爵士乐 周五吃泰国菜"
).split()
ZH_PLACES = "北京 上海 深圳 杭州 成都 东京 柏林 办公室 湖边小屋".split()
ZH_FILLER = (
    "今天 明天 昨天 我们 他们 觉得 发现 决定 已经 还是 可能 需要 问题 方案 进展 结果 用户 客户 服务 数据 "
    "测试 版本 上线 讨论 确认 优化 性能 稳定 风险 预算 时间 下周 本周 会议 文档 代码 接口 配置 记录 跟进"
).split()

SYL = "ka ri to mo ne su la vo xi ze pa du fi go ha ji lu ma no qu re si ta vu we yo zo ba ce de".split()


def _codename(rng: random.Random) -> str:
    return "".join(rng.choice(SYL) for _ in range(rng.randint(2, 3)))


@dataclass
class Vocab:
    projects: list[str]
    hosts: list[str]

    @classmethod
    def make(cls, rng: random.Random, size: int) -> "Vocab":
        n = max(20, int(math.sqrt(size) * 4))
        projects = sorted({_codename(rng).capitalize() for _ in range(n)})
        hosts = sorted({f"{_codename(rng)}-{rng.randint(1, 40):02d}" for _ in range(n)})
        return cls(projects, hosts)


_CUM: dict[int, tuple[object, list[float]]] = {}


def _zipf_pick(rng: random.Random, seq: list[str] | tuple[str, ...], s: float = 0.9) -> str:
    """Pick with Zipf weights 1/rank**s: early items are common, the tail is long."""
    key = id(seq)
    hit = _CUM.get(key)
    if hit is None or hit[0] is not seq:
        acc, cum = 0.0, []
        for i in range(len(seq)):
            acc += 1.0 / (i + 1) ** s
            cum.append(acc)
        hit = (seq, cum)
        _CUM[key] = hit
    return rng.choices(seq, cum_weights=hit[1])[0]


class Writer:
    def __init__(self, rng: random.Random, vocab: Vocab) -> None:
        self.r = rng
        self.v = vocab

    # -- English ---------------------------------------------------------------------------------
    def en_filler(self, n: int) -> str:
        return " ".join(_zipf_pick(self.r, EN_COMMON) for _ in range(n))

    def en_line(self, day: dt.date) -> str:
        r, v = self.r, self.v
        p, q = r.choice(EN_PEOPLE), r.choice(EN_PEOPLE)
        proj, topic = _zipf_pick(r, v.projects), r.choice(EN_TOPICS)
        ticket = f"{proj.upper()[:3]}-{r.randint(100, 9999)}"
        due = day + dt.timedelta(days=r.randint(1, 30))
        kind = r.randrange(9)
        if kind == 0:
            return f"- Met {p} about {proj} {topic}: agreed to {r.choice(EN_ACTIONS)} before {due.isoformat()}."
        if kind == 1:
            return f"- [ ] TODO {ticket}: {r.choice(EN_ACTIONS)} for {proj} ({p} owns it)."
        if kind == 2:
            return f"- {p} prefers {r.choice(EN_PREFS)}; noted for the {topic} work."
        if kind == 3:
            ms = r.randint(3, 900)
            return (f"- {proj} {topic}: p95 went from {ms} ms to {max(1, ms - r.randint(1, ms))} ms on "
                    f"{r.choice(v.hosts)} after we {r.choice(EN_ACTIONS)}.")
        if kind == 4:
            return f"- Decision: {proj} will {r.choice(EN_ACTIONS)}; {q} disagreed, {self.en_filler(r.randint(6, 16))}."
        if kind == 5:
            return f"- {p} is travelling to {r.choice(EN_PLACES)} on {due.isoformat()}, back the week after."
        if kind == 6:
            return f"- Bug in {topic} ({ticket}): {self.en_filler(r.randint(10, 30))}."
        if kind == 7:
            return f"- {self.en_filler(r.randint(8, 40)).capitalize()}."
        return f"- Idea for {proj}: {r.choice(EN_ACTIONS)}, then {r.choice(EN_ACTIONS)}; ask {q}."

    def en_query(self) -> str:
        r, v = self.r, self.v
        kind = r.randrange(5)
        proj, topic, p = _zipf_pick(r, v.projects), r.choice(EN_TOPICS), r.choice(EN_PEOPLE)
        return [
            f"what did we decide about {proj} {topic}",
            f"what does {p} prefer",
            f"when is {p} travelling",
            f"{topic} latency on {r.choice(v.hosts)}",
            f"open todos for {proj}",
        ][kind]

    # -- Chinese ---------------------------------------------------------------------------------
    def zh_filler(self, n: int) -> str:
        return "".join(_zipf_pick(self.r, ZH_FILLER) for _ in range(n))

    def zh_line(self, day: dt.date) -> str:
        r, v = self.r, self.v
        p, q = r.choice(ZH_PEOPLE), r.choice(ZH_PEOPLE)
        proj, topic = _zipf_pick(r, v.projects), r.choice(ZH_TOPICS)
        due = day + dt.timedelta(days=r.randint(1, 30))
        kind = r.randrange(7)
        if kind == 0:
            return f"- 和{p}讨论了{proj}的{topic}，约定在{due.isoformat()}之前{r.choice(ZH_ACTIONS)}。"
        if kind == 1:
            return f"- [ ] 待办：{proj}要{r.choice(ZH_ACTIONS)}（{p}负责）。"
        if kind == 2:
            return f"- {p}喜欢{r.choice(ZH_PREFS)}，做{topic}的时候要记得。"
        if kind == 3:
            ms = r.randint(3, 900)
            return f"- {proj}的{topic}：在{r.choice(v.hosts)}上p95从{ms}毫秒降到{max(1, ms - r.randint(1, ms))}毫秒。"
        if kind == 4:
            return f"- 决定：{proj}先{r.choice(ZH_ACTIONS)}；{q}不同意，{self.zh_filler(r.randint(5, 15))}。"
        if kind == 5:
            return f"- {p}{due.isoformat()}去{r.choice(ZH_PLACES)}出差，下周回来。"
        return f"- {self.zh_filler(r.randint(8, 30))}。"

    def zh_query(self) -> str:
        r, v = self.r, self.v
        proj, topic, p = _zipf_pick(r, v.projects), r.choice(ZH_TOPICS), r.choice(ZH_PEOPLE)
        return [
            f"{proj}的{topic}最后怎么决定的",
            f"{p}喜欢什么",
            f"{p}什么时候出差",
            f"{topic}延迟",
            f"{proj}还有哪些待办",
        ][r.randrange(5)]


def _weight(text: str) -> int:
    """Length in clawmem's chunking units (a CJK character weighs 4 characters, i.e. one token)."""
    return len(text) + 3 * sum(1 for ch in text if "\u3000" <= ch <= "\u9fff")


def estimate_chunks(text: str, tokens: int = 400, overlap: int = 80) -> int:
    w = _weight(text)
    size, carry = tokens * 4, overlap * 4
    return 1 if w <= size else 1 + math.ceil((w - size) / (size - carry))


@dataclass
class Manifest:
    chunks_estimate: int
    files: int
    bytes: int
    seed: int
    zh_share: float
    queries_en: list[str]
    queries_zh: list[str]


def generate(root: Path, chunks: int, seed: int = 42, zh_share: float = 0.25, queries: int = 200) -> Manifest:
    """Write a workspace of about ``chunks`` chunks under ``root`` (replaced if it exists)."""
    rng = random.Random(seed)
    vocab = Vocab.make(rng, chunks)
    w = Writer(rng, vocab)
    if root.exists():
        shutil.rmtree(root)
    (root / "memory").mkdir(parents=True)
    total = 0
    nfiles = 0
    nbytes = 0
    day = dt.date(2015, 1, 1)

    def emit(rel: str, text: str) -> None:
        nonlocal total, nfiles, nbytes
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        data = text.encode("utf-8")
        path.write_bytes(data)
        total += estimate_chunks(text)
        nfiles += 1
        nbytes += len(data)

    def body(zh: bool, target_chars: int, heading: str) -> str:
        lines = [heading, ""]
        size = 0
        section = 0
        while size < target_chars:
            if rng.random() < 0.12 or section == 0:
                section += 1
                hh = rng.randint(8, 20)
                title = (f"## {hh:02d}:{rng.randint(0, 59):02d} · {rng.choice(ZH_TOPICS)}" if zh
                         else f"## {hh:02d}:{rng.randint(0, 59):02d} · {rng.choice(EN_TOPICS).capitalize()}")
                lines += ["", title, ""]
            line = w.zh_line(day) if zh else w.en_line(day)
            lines.append(line)
            size += len(line) * (3 if zh else 1)
        return "\n".join(lines) + "\n"

    # long-term memory first: a few chunks of preferences and decisions
    mem_lines = ["# MEMORY", "", "## People and preferences", ""]
    for p in EN_PEOPLE[:12]:
        mem_lines.append(f"- {p} prefers {rng.choice(EN_PREFS)}.")
    for p in ZH_PEOPLE[:6]:
        mem_lines.append(f"- {p}喜欢{rng.choice(ZH_PREFS)}。")
    mem_lines += ["", "## Standing decisions", ""] + [w.en_line(day) for _ in range(25)]
    emit("MEMORY.md", "\n".join(mem_lines) + "\n")

    topics_done: set[str] = set()
    while total < chunks:
        zh = rng.random() < zh_share
        kind = rng.random()
        # file sizes: log-normal, median ~1.8 KB (one to two chunks), a long tail of big notes
        target = int(min(24000, max(200, rng.lognormvariate(math.log(1800), 0.8))))
        if kind < 0.70:
            rel = f"memory/{day.isoformat()}.md"
            emit(rel, body(zh, target, f"# {day.isoformat()}"))
            day += dt.timedelta(days=1)
        elif kind < 0.90:
            slug = rng.choice(SLUGS) + (f"-{rng.randint(2, 9)}" if rng.random() < 0.5 else "")
            rel = f"memory/{day.isoformat()}-{slug}.md"
            if (root / rel).exists():
                continue
            emit(rel, body(zh, target, f"# Session: {slug} ({day.isoformat()})"))
        else:
            proj = _zipf_pick(rng, vocab.projects)
            folder = "projects" if rng.random() < 0.7 else "people"
            rel = f"memory/{folder}/{proj.lower()}-{len(topics_done)}.md"
            topics_done.add(rel)
            emit(rel, body(zh, target, f"# {proj}"))

    qrng = random.Random(seed + 1)
    w.r = qrng
    man = Manifest(
        chunks_estimate=total,
        files=nfiles,
        bytes=nbytes,
        seed=seed,
        zh_share=zh_share,
        queries_en=[w.en_query() for _ in range(queries)],
        queries_zh=[w.zh_query() for _ in range(queries)],
    )
    (root.parent / f"{root.name}.manifest.json").write_text(json.dumps(man.__dict__, ensure_ascii=False, indent=1))
    return man


def ensure(root: Path, chunks: int, seed: int = 42, zh_share: float = 0.25) -> Manifest:
    """Generate the workspace unless an identical one (same size, seed and mix) is already there."""
    mf = root.parent / f"{root.name}.manifest.json"
    if mf.exists() and root.is_dir():
        data = json.loads(mf.read_text())
        if data.get("seed") == seed and data.get("zh_share") == zh_share and data.get("chunks_estimate", 0) >= chunks:
            return Manifest(**data)
    return generate(root, chunks, seed=seed, zh_share=zh_share)
