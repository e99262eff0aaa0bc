"""Masking secrets in text that clawmem stores or shows: session transcripts before they are indexed, provider
error messages before they reach a tool payload, an exception or a log.

One masker, two kinds of rules:

* **Known secrets** (the configured API key): every occurrence, and every run of 8 or more of its first
  characters (a key cut short by a provider's echo or a length limit), becomes ``***``.
* **Secret shapes**: OpenClaw's rules (``redactSensitiveText``, mode "tools": env-style assignments, JSON
  fields, CLI flags, bearer tokens, common token prefixes, PEM private keys), the regex detectors of Yelp's
  ``detect-secrets`` (AWS, Stripe, JWT, GitHub, GitLab, Slack, SendGrid, Twilio, connection-string passwords,
  quoted ``password = '...'`` and ``"client_secret": "..."`` assignments, ...), and a few shapes neither covers
  (Hugging Face ``hf_`` tokens, "my password is ...", ``密码是 ...``).

Secrets of 18 characters or more keep their first 6 and last 4 characters (``sk-pro…wxyz``, as OpenClaw
shows them); shorter ones, passphrases (with spaces), connection-string passwords and passwords given in words
become ``***``. ``detect-secrets`` is imported on
first use, never by ``import clawmem_core``.
"""

from __future__ import annotations

import re
import threading
from typing import Iterable, NamedTuple, Pattern, Sequence

__all__ = ["mask_secrets", "mask_known", "mask_and_clip"]

_MASK_MIN_LENGTH = 18
_MASK_KEEP_START = 6
_MASK_KEEP_END = 4
#: A known secret is also masked where only its first characters appear, down to this many.
KNOWN_PREFIX_MIN = 8

# A key cut before its END line (a truncated paste) is masked to the end of the text. PEM blocks are cut out
# first and the other rules run only between them: otherwise "key:\n-----BEGIN ..." lets the env-style rule eat
# the armor line and the key body leaks.
_PEM_BLOCK = re.compile(
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----(?:[\s\S]+?-----END [A-Z ]*PRIVATE KEY-----|[\s\S]*\Z)", re.IGNORECASE
)

# (pattern, whole, needles): the secret is the pattern's last non-empty group (or the whole match); ``whole``
# masks it as ``***`` whatever its length (passwords: no part of them is shown). A rule runs only when the
# lower-cased text contains one of its ``needles`` (a substring check is far cheaper than a case-insensitive scan).
_HINT = ("key", "token", "secret", "pass")
_OPENCLAW_RULES: tuple[tuple[Pattern[str], bool, tuple[str, ...]], ...] = tuple(
    (re.compile(p, re.IGNORECASE), whole, needles)
    for p, whole, needles in (
        # Env-style assignments: OPENAI_API_KEY=..., db_password: "...".
        (r"""\b[A-Z0-9_]*(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD)\b\s*[=:]\s*(["']?)([^\s"'\\]+)\1""", False, _HINT),
        # JSON fields.
        (r'"(?:apiKey|token|secret|password|passwd|accessToken|refreshToken)"\s*:\s*"([^"]+)"', False, _HINT),
        # CLI flags.
        (r"""--(?:api[-_]?key|token|secret|password|passwd)\s+(["']?)([^\s"']+)\1""", False, _HINT),
        # Authorization headers.
        (r"Authorization\s*[:=]\s*Bearer\s+([A-Za-z0-9._\-+=]+)", False, ("bearer",)),
        (r"\bBearer\s+([A-Za-z0-9._\-+=]{18,})\b", False, ("bearer",)),
        # Common token prefixes.
        (r"\b(sk-[A-Za-z0-9_-]{8,})\b", False, ("sk-",)),
        (r"\b(ghp_[A-Za-z0-9]{20,})\b", False, ("ghp_",)),
        (r"\b(github_pat_[A-Za-z0-9_]{20,})\b", False, ("github_pat_",)),
        (r"\b(xox[baprs]-[A-Za-z0-9-]{10,})\b", False, ("xox",)),
        (r"\b(xapp-[A-Za-z0-9-]{10,})\b", False, ("xapp-",)),
        (r"\b(gsk_[A-Za-z0-9_-]{10,})\b", False, ("gsk_",)),
        (r"\b(AIza[0-9A-Za-z\-_]{20,})\b", False, ("aiza",)),
        (r"\b(pplx-[A-Za-z0-9_-]{10,})\b", False, ("pplx-",)),
        (r"\b(npm_[A-Za-z0-9]{10,})\b", False, ("npm_",)),
        # Telegram bot tokens: <bot id>:<secret>.
        (r"\b(\d{6,}:[A-Za-z0-9_-]{20,})\b", False, (":",)),
        # Shapes that neither OpenClaw nor detect-secrets knows.
        (r"\b(hf_[A-Za-z0-9]{20,})\b", False, ("hf_",)),  # Hugging Face
        (r"\b(GOCSPX-[A-Za-z0-9_-]{20,})", False, ("gocspx-",)),  # Google OAuth client secret
        (r"\b((?:sk|rk|pk)_(?:live|test)_[0-9A-Za-z]{10,})\b", False, ("_live_", "_test_")),  # Stripe, any length
        # Connection strings with a password: scheme://user:password@host (also without a user).
        (r"\b[a-z][a-z0-9+.\-]*://[^\s:/@]*:([^\s@/]+)@", True, ("://",)),
        # Said in words: "my password is hunter2", "the passphrase was: correct horse", "密码是 hunter2".
        (
            r"\b(?:password|passwd|passphrase|passcode|pass\s?word|pwd|PIN)\s+(?:is|was|=)\s*:?\s*"
            r"""(["'`])?((?(1)[^"'`\n]+|[^\s"'`,;]+))""",
            True,
            ("pass", "pwd", "pin"),
        ),
        (r"""(?:密码|口令|密鑰|密钥|密碼)\s*(?:是|为|為|:|：|=)\s*["'“「]?([^\s"'”」，。,;；]+)""", True,
         ("密码", "口令", "密鑰", "密钥", "密碼")),
    )
)

#: Every contextual and keyword detector needs one of these (lower-cased) in the text: a substring check
#: skips them on ordinary prose, where they cost most of the time.
_HINTS = ("key", "pw", "pass", "token", "secret", "contrase", "cloudant", "softlayer")

_TOKEN_CHARS = re.compile(r"[A-Za-z0-9_\-+/=.]*")


class _Span(NamedTuple):
    start: int
    end: int
    whole: bool


class _Detectors(NamedTuple):
    """detect-secrets' regexes: (pattern, extend over token characters?) and its keyword assignments."""

    tokens: tuple[Pattern[str], ...]
    #: detectors that need a secret-sounding word nearby (run only when the text has one of :data:`_HINTS`)
    contextual: tuple[Pattern[str], ...]
    keyword: tuple[tuple[Pattern[str], int], ...]
    jwt: Pattern[str]


_detectors: _Detectors | None = None
_detectors_lock = threading.Lock()


def _load_detectors() -> _Detectors:
    """detect-secrets' regex detectors, imported on first use (its modules import ``requests``)."""
    global _detectors
    if _detectors is not None:
        return _detectors
    with _detectors_lock:
        if _detectors is not None:
            return _detectors
        from detect_secrets.plugins import (  # noqa: I001 - one import per detector family
            artifactory, aws, azure_storage_key, basic_auth, cloudant, discord, github_token, gitlab_token,
            ibm_cloud_iam, ibm_cos_hmac, jwt, keyword, mailchimp, npm, openai, pypi_token, sendgrid, slack,
            softlayer, square_oauth, stripe, telegram_token, twilio,
        )

        classes = (
            artifactory.ArtifactoryDetector, aws.AWSKeyDetector, azure_storage_key.AzureStorageKeyDetector,
            basic_auth.BasicAuthDetector, discord.DiscordBotTokenDetector, github_token.GitHubTokenDetector,
            gitlab_token.GitLabTokenDetector, mailchimp.MailchimpDetector, npm.NpmDetector, openai.OpenAIDetector,
            pypi_token.PypiTokenDetector, sendgrid.SendGridDetector, slack.SlackDetector,
            square_oauth.SquareOAuthDetector, stripe.StripeDetector, telegram_token.TelegramBotTokenDetector,
            twilio.TwilioKeyDetector,
        )
        contextual = (cloudant.CloudantDetector, ibm_cloud_iam.IbmCloudIamDetector,
                      ibm_cos_hmac.IbmCosHmacDetector, softlayer.SoftlayerDetector)
        patterns = tuple(p for cls in classes for p in cls.denylist)
        hinted = tuple(p for cls in contextual for p in cls.denylist)
        # Quoted assignments to secret-sounding names, as detect-secrets checks them in code: password = '...',
        # "client_secret": "...", secret => '...' (unquoted ones are OpenClaw's env-style rule; without quotes
        # detect-secrets' config rules would take prose such as "secret: we met at the cafe").
        groups = keyword.QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP
        _detectors = _Detectors(patterns, hinted, tuple(groups.items()), jwt.JwtTokenDetector.denylist[0])
        return _detectors


def _strip(text: str, start: int, end: int) -> tuple[int, int]:
    """Trim the quotes, spaces and separators a detector's match may include around the secret."""
    while start < end and text[start] in " \t\r\n\"'`=:,;":
        start += 1
    while end > start and text[end - 1] in " \t\r\n\"'`,;":
        end -= 1
    return start, end


def _spans(text: str) -> list[_Span]:
    spans: list[_Span] = []
    lowered = text.lower()
    hinted = any(hint in lowered for hint in _HINTS)
    for pattern, whole, needles in _OPENCLAW_RULES:
        if not any(needle in lowered for needle in needles):
            continue
        for m in pattern.finditer(text):
            for index in range(pattern.groups, 0, -1):  # the last non-empty group is the secret
                if m.group(index):
                    spans.append(_Span(m.start(index), m.end(index), whole))
                    break
            else:
                spans.append(_Span(m.start(), m.end(), whole))
    det = _load_detectors()
    for pattern in det.tokens + det.contextual if hinted else det.tokens:
        for m in pattern.finditer(text):
            groups = [i for i in range(1, pattern.groups + 1) if m.group(i)]
            if groups:
                spans.extend(_Span(m.start(i), m.end(i), False) for i in groups)
            else:
                start, end = _strip(text, m.start(), m.end())
                # A token the regex matched only in part (a longer key) is masked to its end.
                end = _TOKEN_CHARS.match(text, end).end()  # type: ignore[union-attr]
                spans.append(_Span(start, end, False))
    for m in det.jwt.finditer(text):
        spans.append(_Span(m.start(), _TOKEN_CHARS.match(text, m.end()).end(), False))  # type: ignore[union-attr]
    for pattern, group in det.keyword if hinted else ():
        for m in pattern.finditer(text):
            if m.group(group):
                start, end = _strip(text, m.start(group), m.end(group))
                if end > start:  # a passphrase (with spaces) shows nothing of itself
                    spans.append(_Span(start, end, any(c.isspace() for c in text[start:end])))
    return spans


def _mask_token(token: str) -> str:
    if len(token) < _MASK_MIN_LENGTH:
        return "***"
    return f"{token[:_MASK_KEEP_START]}…{token[-_MASK_KEEP_END:]}"


def _mask_pem(block: str) -> str:
    lines = [line for line in re.split(r"\r?\n", block) if line]
    if len(lines) < 2 or "-----END" not in lines[-1].upper():
        head = re.match(r"-----BEGIN [A-Z ]*PRIVATE KEY-----", block, re.IGNORECASE)
        return f"{head.group(0)}\n…redacted…" if head and len(lines) > 1 else "***"
    return f"{lines[0]}\n…redacted…\n{lines[-1]}"


def _mask_plain(text: str) -> str:
    spans = sorted(s for s in _spans(text) if s.end > s.start)
    if not spans:
        return text
    out: list[str] = []
    position = 0
    start, end, whole = spans[0]
    for s in spans[1:] + [_Span(len(text) + 1, len(text) + 1, False)]:
        if s.start < end:  # overlapping detections mask as one
            end, whole = max(end, s.end), whole or s.whole
            continue
        out.append(text[position:start])
        out.append("***" if whole else _mask_token(text[start:end]))
        position = end
        start, end, whole = s
    out.append(text[position:])
    return "".join(out)


def mask_known(text: str, secrets: Iterable[str | None]) -> str:
    """Replace each secret (4+ characters) in ``text`` with ``***``, and every run of its first
    :data:`KNOWN_PREFIX_MIN` or more characters (a key cut short) too."""
    for secret in sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True):
        text = text.replace(secret, "***")
        if len(secret) < KNOWN_PREFIX_MIN:
            continue
        head = secret[:KNOWN_PREFIX_MIN]
        position = text.find(head)
        while position >= 0:
            end = position + KNOWN_PREFIX_MIN
            while end < len(text) and end - position < len(secret) and text[end] == secret[end - position]:
                end += 1
            text = text[:position] + "***" + text[end:]
            position = text.find(head, position + 3)
    return text


def mask_secrets(text: str, known: Sequence[str | None] = ()) -> str:
    """Mask API keys, tokens, passwords, connection-string passwords and private keys in ``text``; ``known``
    secrets (the configured API key) are masked wherever they, or 8+ of their first characters, appear.

    A PEM private key keeps only its BEGIN and END lines (``***`` when it sits on one line).
    """
    if not text:
        return text
    if known:
        text = mask_known(text, known)
    pieces: list[str] = []
    position = 0
    for block in _PEM_BLOCK.finditer(text):
        pieces.append(_mask_plain(text[position : block.start()]))
        pieces.append(_mask_pem(block.group(0)))
        position = block.end()
    pieces.append(_mask_plain(text[position:]))
    return "".join(pieces)


def mask_and_clip(text: str, limit: int, known: Sequence[str | None] = ()) -> str:
    """:func:`mask_secrets`, then cut to ``limit`` characters (never the other way round: a secret cut
    first would survive as a prefix)."""
    masked = mask_secrets(text, known)
    return masked if len(masked) <= limit else masked[: max(0, limit - 1)] + "…"
