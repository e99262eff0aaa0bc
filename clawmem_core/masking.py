"""Masking secrets in text that clawmem stores or shows: session transcripts before they are indexed,
conversations clawmem archives into ``memory/``, provider error messages before they reach a tool payload,
an exception or a log.

One masker, three kinds of rules, all compiled once:

* **Known secrets** (the configured API key): every occurrence, and every run of 8 or more of its first
  characters (a key cut short by a provider's echo or a length limit), becomes ``***``.
* **Token shapes** (:mod:`clawmem_core.secret_patterns`): GitHub, GitLab, OpenAI, Anthropic, xAI, Google, AWS,
  Slack, Stripe, Twilio, SendGrid, npm, PyPI, JWTs and more. The token becomes its vendor prefix and ``***``
  (``ghp_***``): nothing of the secret itself is shown.
* **Secrets by context**: private key blocks (PEM, OpenSSH, PGP), ``scheme://user:password@host``,
  ``Authorization: Basic|Bearer ...``, env-style and JSON assignments (``OPENAI_API_KEY=...``,
  ``"client_secret": "..."``), command lines (``--password PW``, ``curl -u user:PW``, ``mysql -pPW``,
  ``docker login -p PW``, ``sshpass -p``, ``redis-cli -a``), an AWS secret key after its key id, and secrets
  said in words ("my password is ...", "the passphrase is correct horse battery staple", ``密码是 ...``).
  A value found by context is masked only when it looks like a secret: a placeholder (``<your key here>``,
  ``$VAR``), a code reference or an ordinary word ("her password was changed", ``PRIMARY_KEY: id``) stays.
  Names are matched case-sensitively in an upper-case, ``snake_case`` or ``camelCase`` form: ``monkey`` and
  ``whiskey`` are not keys.

Each rule runs only on the lines holding one of its literals (found with a substring search), so ordinary prose
costs a handful of scans. Text is matched with its non-ASCII hyphens read as ``-``.
"""

from __future__ import annotations

import math
import re
import sys
from collections import Counter
from typing import Iterable, Iterator, NamedTuple, Pattern, Sequence

from .secret_patterns import FAMILIES

__all__ = ["mask_secrets", "mask_known", "mask_and_clip"]

MASK = "***"
#: A known secret is also masked where only its first characters appear, down to this many.
KNOWN_PREFIX_MIN = 8

# Hyphens a word processor or a chat client puts in place of "-"; read as "-" (one character for one).
_HYPHENS = "\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe63\uff0d"
_DEHYPHEN = str.maketrans(_HYPHENS, "-" * len(_HYPHENS))

# A key cut before its END line (a truncated paste) is masked to the end of the text. Key blocks are cut out
# first and the other rules run only between them: otherwise "key:\n-----BEGIN ..." lets an assignment rule eat
# the armor line and the key body leaks.
_ARMOR = r"(?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?"
_PEM_BLOCK = re.compile(rf"-----BEGIN {_ARMOR}-----(?:[\s\S]+?-----END {_ARMOR}-----|[\s\S]*\Z)", re.IGNORECASE)
_PEM_HEAD = re.compile(rf"-----BEGIN {_ARMOR}-----", re.IGNORECASE)

# -- values: when does a value found by context look like a secret? -----------------------------------------

# Words of prose around "password is" / "Token:": pronouns, articles, prepositions, auxiliaries, time words...
_FUNCTION_WORDS = frozenset("""
a an the this that these those it its it's my your his her our their me you him them us we they she he i one
not no never also too very so still now then just only already always again ever even yet soon here there
being been be is was are were has have had will would can could should must may might do does did done
in on at to for of with by from as into onto about like over under after before since until via per
what which who whom whose where when how why if and or but because than though although while
same different new old other another any some every each all both either neither none nothing something
last next today yesterday tomorrow tonight week weeks month months year years day days time times morning
see check ask use continue proceed login log sign access get make keep avoid protect follow contact
""".split())
# ... and what a password "is": never a secret on its own ("the password is correct", "was changed").
_PREDICATE_WORDS = frozenset("""
correct incorrect wrong right valid invalid expired empty blank missing required optional mandatory needed
unknown known secret private public personal shared safe secure insecure weak strong long short simple easy
hard complex fine ok okay good bad great important sensitive visible hidden temporary default hashed encrypted
stored saved set reset changed updated rotated revoked leaked compromised written sent attached included below
above following case forgotten lost locked protected managed generated random unique mine yours hers ours
theirs sure true false null none nil undefined tbd n/a well insensitive coded
shown seen given taken made found kept told said stolen hidden chosen broken frozen spoken known gone done
""".split())
_PROSE_WORDS = _FUNCTION_WORDS | _PREDICATE_WORDS

_PLACEHOLDER = re.compile(
    r"""(?x)^(?:
        <.*                                  # <your key here>, <password>
      | \$\{.* | \$[A-Z_][A-Z0-9_]*           # ${VAR}, $VAR
      | \{\{.* | \{[A-Za-z_][A-Za-z0-9_]*\}   # {{ secret }}, {password}
      | %\(?[A-Za-z_]*\)?s | %[A-Za-z_]+%    # %(password)s, %PASSWORD%
      | [*xX•.…_-]+ | \[.*                    # ***, xxxx, ..., [redacted]
      | (?:your|my|the|an?|enter|insert|put)[-_ ](?:[a-z]+[-_ ])*?(?:key|token|secret|password|pass|value|id|here)s?
      | [a-z_-]*[-_](?:here|goes[-_]here)      # your-api-key-here, your_key_here
      | (?i:null|none|nil|true|false|undefined|empty|redacted|n/a|tbd|todo|fixme|placeholder|dummy)
    )$"""
)

# A value that reads as code: a call (os.getenv(...), get_secret()), or a name that carries its own
# keyword (self.api_key = api_key, password=settings.DB_PASSWORD).
_CALL = re.compile(r"^[A-Za-z_][\w.]*\(")
_CODE_KEYWORD = re.compile(r"(?i)key|token|secret|pass|pwd|auth|cred")
_INDEX = re.compile(r"^[A-Za-z_][\w.]*\[")  # os.environ[, secrets[
_ATTRIBUTE = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+$")  # self.token, settings.API_KEY
_KEYWORD_WORDS = frozenset({"password", "passwd", "passphrase", "token", "secret", "key", "apikey", "credentials",
                            # type annotations: password: str = ..., token: Optional[str]
                            "str", "string", "int", "bytes", "bool", "float", "secretstr", "optional", "any",
                            # an authorization scheme named without its credentials
                            "bearer", "basic", "digest"})
_TRAILING = ".,;:)]}>"


def _entropy(value: str) -> float:
    counts = Counter(value)
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


_LETTERS = re.compile(r"^[A-Za-z_]+$")
_IDENTIFIER_CHAIN = re.compile(r"^[A-Za-z_]+(?:\.[A-Za-z_]+)*$")
_CONSTANT = re.compile(r"^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+$")  # NO_REPLY, DEFAULT_VALUE
_WORD = re.compile(r"[A-Za-z]+")


def _reads_as_code(value: str) -> bool:
    if _CALL.match(value) or _INDEX.match(value) or _CONSTANT.match(value):
        return True
    if _ATTRIBUTE.match(value) and _CODE_KEYWORD.search(value.rsplit(".", 1)[1]):
        return True
    if value.lower() in _KEYWORD_WORDS:
        return True
    return "_" in value and value.replace("_", "").isalnum() and bool(_CODE_KEYWORD.search(value)) and (
        value.islower() or value.isupper())


def _weak(value: str) -> bool:
    """A value given for a password or to a name that says it is secret (``DB_PASSWORD``, ``--token``): a
    secret unless it is a placeholder, a code reference or a word of prose."""
    if len(value) < 3 or _PLACEHOLDER.match(value) or _reads_as_code(value):
        return False
    lowered = value.lower()
    if lowered in _PROSE_WORDS:
        return False
    if "-" in value and all(part.isalpha() and _is_predicate(part) for part in lowered.split("-")):
        return False  # case-sensitive, hard-coded
    return not (value.isalpha() and value.islower() and len(value) > 4 and lowered.endswith(("ed", "ly", "ing")))


def _strong(value: str) -> bool:
    """A value after a vague name (``key``, ``token``, ``PRIMARY_KEY``): a secret only when it looks random."""
    if len(value) < 12 or " " in value or "://" in value or _PLACEHOLDER.match(value) or _reads_as_code(value):
        return False
    if not (any(c.isdigit() for c in value) and any(c.isalpha() for c in value)):
        return False
    if value[0] in "/~.":  # a path
        return False
    # mostly words: an identifier or a model name (memory_index_meta_v1, sentence-transformers/all-MiniLM-L6-v2)
    words = sum(len(w) for w in _WORD.findall(value) if len(w) >= 3 and (w.islower() or w.istitle()))
    if words * 2 > len(value):
        return False
    return _entropy(value) >= 3.0


# -- contextual rules ------------------------------------------------------------------------------------------

_VALUE = r"""(?P<s>"[^"\n]*"|'[^'\n]*'|`[^`\n]*`|“[^”\n]*”|[^\s"'`“]+)"""
_CLI_END = r"[^\n|;&]{0,200}?"  # the rest of one shell command (bounded: a long line is never rescanned whole)

_STRONG_WORDS = re.compile(r"(?i)pass|pwd|secret|token|api_?key|apikey|access_?key|private_?key|auth|credential")
_BARE = frozenset({"KEY", "TOKEN", "SECRET", "PASS", "PWD", "CREDENTIAL", "CREDENTIALS"})


class _LazyPattern:
    """A regular expression compiled on its first use: most rules never run (their needles are
    absent), and compiling all of them would cost every process that masks anything."""

    __slots__ = ("source", "_compiled")

    def __init__(self, source: str) -> None:
        self.source = source
        self._compiled: Pattern[str] | None = None

    def finditer(self, text: str, pos: int = 0, endpos: int = sys.maxsize) -> Iterator[re.Match[str]]:
        compiled = self._compiled
        if compiled is None:
            compiled = self._compiled = re.compile(self.source)
        return compiled.finditer(text, pos, endpos)


class _Rule(NamedTuple):
    name: str
    pattern: _LazyPattern
    #: the rule runs only on the lines holding one of these (in the lower-cased text, when ``lowered``)
    needles: tuple[str, ...]
    lowered: bool
    #: "" (always a secret), "weak", "strong", "name" (by the strength of group ``n``), "words" (a password
    #: said in prose: may run over several words)
    check: str
    #: characters past a needle's line a match may reach (an AWS secret key on the line after its id)
    reach: int = 0


def _rule(name: str, pattern: str, needles: tuple[str, ...], check: str = "", *, lowered: bool = False,
          reach: int = 0) -> _Rule:
    return _Rule(name, _LazyPattern(pattern), needles, lowered, check, reach)


# Upper case: PGPASSWORD, OPENAI_API_KEY, DB_PASS (KEY, PASS and PWD only after "_": MONKEY, BYPASS are words).
_NAME_U = (r"(?:[A-Z0-9]+[_-])*(?:[A-Z0-9]*(?:TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE)|API_?KEY|APIKEY|KEY|PWD|PASS"
           r"|CREDENTIALS?)")
_NAME_S = (r"(?:[a-z0-9]+[_-])+(?:api_?key|apikey|key|token|secret|password|passwd|passphrase|pwd|pass"
           r"|credentials?)")
_NAME_C = r"[a-z][a-z0-9]*(?:[A-Z][a-z0-9]*)*(?:Key|Token|Secret|Password|Passwd|Passphrase|Pwd|Credentials?)"
_PW_WORDS = r"pass(?:word|wd|phrase|code)|pass\s+word|pw|(?-i:PIN)(?:\s+code)?|pin\s+code"
_KEY_WORDS = r"(?:[A-Za-z]+[ _-])?(?:key|token|secret|credential)s?"
_FOR = r"(?:\s+(?:for|of|to|on)(?:\s+[^\s:=,.;]+){1,3}?)?"
_IS = (r"(?:(?:\s+(?:is|was|has\s+been|will\s+be|got))?\s+(?:changed|set|reset|updated)\s+to\b"
       r"|\s*(?:\bis\b|\bwas\b|\bare\b|\bhas\s+been\b|\bwill\s+be\b|=|:|：))\s*:?\s*")

_RULES: tuple[_Rule, ...] = (
    # scheme://user:password@host (also without a user).
    _rule("url-userinfo", r"(?i)\b[a-z][a-z0-9+.\-]*://[^\s:/@]*:(?P<s>[^\s@/]+)@", ("://",), "weak"),
    # Authorization headers; a bare bearer token.
    _rule("authorization",
          r"(?i)\b(?:proxy-)?authorization\s*[:=]\s*[\"']?(?:(?:bearer|basic|token|digest|apikey|api-key)\s+)?"
          r"(?P<s>[^\s\"'`,;]+)", ("authorization",), "weak", lowered=True),
    _rule("bearer", r"\b[Bb]earer\s+(?P<s>[A-Za-z0-9._~+/=-]{16,})", ("earer",)),
    _rule("api-key-header",
          r"(?i)\b(?:x-)?(?:api-?key|auth-token|access-token|api-token|private-token|x-goog-api-key)\s*:\s*"
          r"[\"']?(?P<s>[^\s\"',;]+)", ("api", "token"), "weak", lowered=True),
    # JSON / Python dict fields: "client_secret": "...", 'password': '...'.
    _rule("json-field",
          r"""(?i)(?P<q>["'])(?P<n>[A-Za-z0-9_.-]*(?:password|passwd|passphrase|secret|token|api[_-]?key|apikey"""
          r"""|access[_-]?key|private[_-]?key|credentials?))(?P=q)\s*:\s*(?P<s>"(?:[^"\\\n]|\\.)*"|'[^'\n]*')""",
          ("pass", "secret", "token", "key", "cred"), "weak", lowered=True),
    # Env-style assignments, case-sensitive: OPENAI_API_KEY=..., db_password: "...", apiKey = '...'.
    _rule("assignment",
          rf"(?<![A-Za-z0-9_.-])(?P<n>{_NAME_U}|{_NAME_S}|{_NAME_C})(?![A-Za-z0-9_])\s*(?:=|:=|=>|:(?!//))\s*"
          + _VALUE, ("key", "token", "secret", "pass", "pwd", "cred"), "name", lowered=True),
    # .npmrc: //registry.npmjs.org/:_authToken=...
    _rule("npmrc", r":_(?:authToken|auth|password)\s*=\s*" + _VALUE, (":_auth", ":_password")),
    # .netrc: machine host login user password PW
    _rule("netrc", r"\bmachine\s+\S+\s+login\s+\S+\s+password\s+(?P<s>\S+)", ("machine",)),
    # Command-line flags: --password PW, --api-key=KEY, --client-secret "..." (not --password-stdin).
    _rule("cli-flag",
          r"(?i)(?<![\w-])--(?P<n>[a-z0-9-]*(?:password|passwd|passphrase|secret|token|api-?key|apikey|access-key"
          r"|auth-key))(?![\w-])(?:\s*=\s*|\s+)" + _VALUE, ("--",), "weak"),
    # mysql -pPW (attached: "-p db" asks for the password and names a database).
    _rule("mysql-p", r"\b(?:mysql|mysqldump|mysqladmin|mysqlimport|mysqlcheck|mysqlsh|mariadb(?:-dump|-admin)?)\b"
          + _CLI_END + r"\s-p(?P<s>[^\s\"'-][^\s]*|\"[^\"\n]*\"|'[^'\n]*')", ("mysql", "mariadb")),
    # docker login -p PW (also podman, nerdctl, buildah, skopeo, helm registry).
    _rule("registry-login",
          r"\b(?:docker|podman|nerdctl|buildah|skopeo|oras|helm\s+registry)\s+login\b" + _CLI_END
          + r"\s-p(?:\s+|=)" + _VALUE, ("login",)),
    # curl -u user:PW, curl --user user:PW, httpie -a user:PW.
    _rule("curl-user", r"\b(?:curl|http|xh)(?=\s)" + _CLI_END + r"\s(?:-u\s*|--user(?:\s+|=)|-a\s+|--auth(?:\s+|=))"
          r"(?P<q>[\"'])?[^\s:\"']*:(?P<s>(?(q)[^\"'\n]+|[^\s\"']+))", ("curl ", "http ", "xh ")),
    _rule("sshpass", r"\bsshpass\s+-p\s*" + _VALUE, ("sshpass",)),
    _rule("redis-cli", r"\bredis-cli\b" + _CLI_END + r"\s-a\s+" + _VALUE, ("redis-cli",)),
    _rule("ldap", r"\bldap[a-z]+\b" + _CLI_END + r"\s-w\s+" + _VALUE, ("ldap",)),
    # An AWS secret key: after its key id, or named in prose ("secret access key wJalr...").
    _rule("aws-secret-after-id",
          r"(?:AKIA|ASIA)[A-Z2-7]{16}(?![A-Za-z0-9])[\s\S]{0,120}?(?<![A-Za-z0-9/+])"
          r"(?P<s>(?=[A-Za-z0-9/+]*[a-z])(?=[A-Za-z0-9/+]*[A-Z])[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])",
          ("AKIA", "ASIA"), reach=120),
    _rule("aws-secret-named",
          r"(?i)secret[ _-]?(?:access[ _-]?)?key\W{0,20}?(?:(?:is|was)\s+)?(?<![A-Za-z0-9/+])"
          r"(?P<s>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])", ("secret",), lowered=True),
    # Azure connection strings and SAS signatures.
    _rule("azure", r"(?:AccountKey|SharedAccessKey|SharedSecret)=(?P<s>[A-Za-z0-9+/=]{20,})", ("Key=", "Secret=")),
    _rule("sas-signature", r"[?&]sig=(?P<s>[A-Za-z0-9%+/=]{20,})", ("sig=",)),
    # Said in words: "my password is hunter2", "the passphrase is correct horse battery staple".
    _rule("password-words", rf"(?i)(?<![A-Za-z0-9_])(?P<n>{_PW_WORDS}){_FOR}{_IS}" + _VALUE,
          ("pass", "pin", "pw"), "words", lowered=True),
    # "set the wifi password to Hunter22", "changed my passphrase to ..."
    _rule("password-set",
          r"(?i)\b(?:set|change|changed|reset|update|updated)\s+(?:(?:the|my|your|his|her|our|their|its|a|new)\s+)*"
          rf"(?:[A-Za-z-]+\s+)?(?P<n>{_PW_WORDS})\s+to\s+" + _VALUE, ("pass", "pin", "pw"), "words", lowered=True),
    # A secret name and a random value with nothing between: aws_secret_access_key wJalr..., CLIENT_SECRET 8f3a...
    _rule("name-value", rf"(?<![A-Za-z0-9_.-])(?P<n>{_NAME_U}|{_NAME_S})[ \t]+" + _VALUE,
          ("key", "token", "secret", "pass", "pwd", "cred"), "strong", lowered=True),
    # "the API key is 8f3a...", "token: ghx7...": only a value that looks random.
    _rule("key-words", rf"(?i)(?<![A-Za-z0-9_])(?P<n>{_KEY_WORDS}){_FOR}{_IS}" + _VALUE,
          ("key", "token", "secret", "credential"), "strong", lowered=True),
    # 密码是 Xk9#mP2$vL, 令牌：ghx7..., 密钥为 ... (the value is the ASCII run after the word).
    _rule("chinese",
          r"(?P<n>密码|密碼|口令|密钥|密鑰|秘钥|私钥|令牌|验证码|驗證碼)\s*(?:是|为|為|改成|改为|改為|设为|设置为|:|：|=)\s*"
          r"[\"'“「『]?\s*(?P<s>[!-~]+)",
          ("密码", "密碼", "口令", "密钥", "密鑰", "秘钥", "私钥", "令牌", "验证码", "驗證碼"), "weak"),
)

# Family patterns start with their prefix (a literal the regex engine searches fast); the character before
# a match is checked apart: no letter, digit or "_" (``\b`` would fail after a Chinese character).
_FAMILY_RULES: tuple[_Rule, ...] = tuple(_rule(f.name, f.pattern, f.needles) for f in FAMILIES)
_WORD_CHAR = re.compile(r"[A-Za-z0-9_]")

# The words of a passphrase said in prose, after its first one.
_NEXT_WORD = re.compile(r"[ \t]+([A-Za-z][A-Za-z'-]*)(?=[\s.,;:!?)\]]|$)")


def _is_predicate(word: str) -> bool:
    lowered = word.lower()
    return lowered in _PROSE_WORDS or (word.isalpha() and lowered.endswith(("ed", "ly", "ing")) and len(word) > 4)


def _password_words(view: str, start: int, end: int) -> int | None:
    """The end of a password said in prose whose first word is ``view[start:end]``, or ``None`` when the words
    are prose ("was changed", "is in the drawer"). Several words are a passphrase when there are three or more
    ("correct horse battery staple"), or when the first is no ordinary predicate ("purple monkey")."""
    first = view[start:end]
    if first.lower() in _FUNCTION_WORDS or _reads_as_code(first) or _PLACEHOLDER.match(first):
        return None
    if not first.isalpha():
        return end if _weak(first) else None
    stop, count = end, 1
    for _ in range(7):
        m = _NEXT_WORD.match(view, stop)
        if not m or _is_predicate(m.group(1)):
            break
        stop, count = m.end(), count + 1
    if count >= 3:
        return stop
    if _is_predicate(first):
        return None
    return stop


class _Span(NamedTuple):
    start: int
    end: int


def _value_span(view: str, m: re.Match[str]) -> tuple[int, int, str]:
    """The value of group ``s`` without its quotes and trailing punctuation, and whether it was quoted."""
    start, end = m.span("s")
    value = view[start:end]
    if value.endswith(("...", "…")):  # a key shown cut short: sk-...
        return start, start, ""
    if len(value) >= 2 and value[0] in "\"'`“" and value[-1] in "\"'`”":
        inner = value[1:-1]
        if not inner or inner[0] in " \t,;:.)]}'\"" or not any(c.isalnum() for c in inner):  # `, in ` is no value
            return start, start, ""
        return start + 1, end - 1, "quoted"
    while end > start and view[end - 1] in _TRAILING:
        end -= 1
    return start, end, ""


def _accept(rule: _Rule, view: str, m: re.Match[str], start: int, end: int, quoted: str) -> int | None:
    """The end of the secret when ``rule``'s value check accepts it, else ``None``."""
    value = view[start:end]
    if not value.strip():
        return None
    check = rule.check
    if check == "name":
        name = m.group("n")
        if not quoted and not name.isupper() and (_LETTERS.match(value) or value[0] in "([{"):
            return None  # code or a docstring: api_key = value, client_secret: ClientSecret, token: Number of...
        check = "weak" if _STRONG_WORDS.search(name) and name not in _BARE else "strong"
    if check == "words":
        if quoted:
            return end if not _PLACEHOLDER.match(value) else None
        if "=" in view[m.end("n") : start] and _IDENTIFIER_CHAIN.match(value):
            return None  # code: password = value, password = request.url.password
        return _password_words(view, start, end)
    if check == "weak":
        if quoted:  # code or configuration: any value but a placeholder
            return end if len(value) >= 3 and not (_PLACEHOLDER.match(value) or _reads_as_code(value)) else None
        return end if _weak(value) else None
    if check == "strong":
        return end if _strong(value) else None
    return end


def _windows(hay: str, needles: tuple[str, ...], reach: int) -> list[tuple[int, int]]:
    """The lines of ``hay`` holding a needle (and ``reach`` characters on), merged; a substring search
    is far cheaper than a regular expression over the whole text."""
    found: list[tuple[int, int]] = []
    for needle in needles:
        i = hay.find(needle)
        while i >= 0:
            end = hay.find("\n", i + len(needle) + reach)
            end = len(hay) if end < 0 else end
            found.append((hay.rfind("\n", 0, i) + 1, end))
            i = hay.find(needle, end)
    if len(found) < 2:
        return found
    found.sort()
    merged = [found[0]]
    for start, end in found[1:]:
        if start <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _spans(view: str) -> list[_Span]:
    lowered: str | None = None
    spans: list[_Span] = []
    #: where a vendor token begins -> where its secret begins (a value found by context keeps the prefix)
    prefixes: dict[int, int] = {}
    for rule in _FAMILY_RULES:
        for start, end in _windows(view, rule.needles, 0):
            for m in rule.pattern.finditer(view, start, end):
                if m.start() and _WORD_CHAR.match(view, m.start() - 1):  # inside a longer word
                    continue
                spans.append(_Span(*m.span("s")))
                prefixes[m.start()] = m.start("s")
    for rule in _RULES:
        hay = view
        if rule.lowered:
            if lowered is None:
                lowered = view.lower()
                if len(lowered) != len(view):  # a letter whose lower case is longer: search it all
                    lowered = view
            hay = lowered
        windows = [(0, len(view))] if hay is view and rule.lowered else _windows(hay, rule.needles, rule.reach)
        for start, end in windows:
            for m in rule.pattern.finditer(view, start, end):
                start_s, end_s, quoted = _value_span(view, m)
                stop = _accept(rule, view, m, start_s, end_s, quoted)
                if stop is not None and stop > start_s:
                    spans.append(_Span(prefixes.get(start_s, start_s), stop))
    return spans


def _mask_plain(text: str, view: str) -> str:
    spans = sorted(s for s in _spans(view) if s.end > s.start)
    if not spans:
        return text
    out: list[str] = []
    position = 0
    start, end = spans[0]
    for s in spans[1:] + [_Span(len(text) + 1, len(text) + 1)]:
        if s.start <= end:  # overlapping (or touching) detections mask as one
            end = max(end, s.end)
            continue
        out.append(text[position:start])
        out.append(MASK)
        position = end
        start, end = s
    out.append(text[position:])
    return "".join(out)


def _mask_pem(block: str) -> str:
    lines = [line for line in re.split(r"\r?\n", block) if line]
    if len(lines) < 2 or "-----END" not in lines[-1].upper():
        head = _PEM_HEAD.match(block)
        return f"{head.group(0)}\n…redacted…" if head and len(lines) > 1 else MASK
    return f"{lines[0]}\n…redacted…\n{lines[-1]}"


def mask_known(text: str, secrets: Iterable[str | None]) -> str:
    """Replace each secret (4+ characters) in ``text`` with ``***``, and every run of its first
    :data:`KNOWN_PREFIX_MIN` or more characters (a key cut short) too."""
    for secret in sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True):
        text = text.replace(secret, MASK)
        if len(secret) < KNOWN_PREFIX_MIN:
            continue
        head = secret[:KNOWN_PREFIX_MIN]
        position = text.find(head)
        while position >= 0:
            end = position + KNOWN_PREFIX_MIN
            while end < len(text) and end - position < len(secret) and text[end] == secret[end - position]:
                end += 1
            text = text[:position] + MASK + text[end:]
            position = text.find(head, position + 3)
    return text


def mask_secrets(text: str, known: Sequence[str | None] = ()) -> str:
    """Mask API keys, tokens, passwords, connection-string passwords and private keys in ``text``; ``known``
    secrets (the configured API key) are masked wherever they, or 8+ of their first characters, appear.

    A vendor token keeps its prefix (``ghp_***``); every other secret becomes ``***``; a private key block
    keeps only its BEGIN and END lines (``***`` when it sits on one line).
    """
    if not text:
        return text
    if known:
        text = mask_known(text, known)
    view = text.translate(_DEHYPHEN) if any(h in text for h in _HYPHENS) else text
    pieces: list[str] = []
    position = 0
    for block in _PEM_BLOCK.finditer(view):
        pieces.append(_mask_plain(text[position : block.start()], view[position : block.start()]))
        pieces.append(_mask_pem(text[block.start() : block.end()]))
        position = block.end()
    pieces.append(_mask_plain(text[position:], view[position:]))
    return "".join(pieces)


def mask_and_clip(text: str, limit: int, known: Sequence[str | None] = ()) -> str:
    """:func:`mask_secrets`, then cut to ``limit`` characters (never the other way round: a secret cut
    first would survive as a prefix)."""
    masked = mask_secrets(text, known)
    return masked if len(masked) <= limit else masked[: max(0, limit - 1)] + "…"
