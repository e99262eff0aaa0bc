"""Store URLs: which URL names a PostgreSQL store, and a URL or conninfo string with its secrets
replaced by ``***`` (for messages, logs and ``MemoryConfig.to_dict``). Imports nothing of
clawmem's, so that the configuration and every store can use it."""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit, urlunsplit

#: libpq parameters that carry a secret (those libpq itself shows as "*", and the SCRAM keys).
SECRET_PARAMETERS = frozenset({"password", "sslpassword", "oauth_client_secret", "scram_client_key",
                               "scram_server_key"})
# key=value pairs of a conninfo string: host=db password='a b' sslpassword = x
_CONNINFO_PAIR = re.compile(r"([A-Za-z_%0-9]+)(\s*=\s*)('(?:[^'\\]|\\.)*'?|[^\s']*)")


def _is_password_key(key: str) -> bool:
    """A key libpq reads as a secret parameter, in any spelling it accepts (it decodes ``pass%77ord``) and
    in upper case (refused by libpq, but quoted in its error)."""
    return unquote(key).strip().lower() in SECRET_PARAMETERS


def _is_uri(url: str) -> bool:
    return bool(re.match(r"(?i)\s*postgres(?:ql)?://", url))


def redact_url(url: str) -> str:
    """``url`` with every secret replaced by ``***``: the userinfo password and each secret parameter
    (``password``, ``sslpassword``, ...) of the query string, in any spelling; a ``key=value`` conninfo
    string has its secret values replaced the same way."""
    if not _is_uri(url):
        return _CONNINFO_PAIR.sub(lambda m: f"{m.group(1)}{m.group(2)}***" if _is_password_key(m.group(1))
                                  else m.group(0), url)
    try:
        parts = urlsplit(url)
    except ValueError:
        return "postgresql://***"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        if ":" in userinfo:
            userinfo = userinfo.split(":", 1)[0] + ":***"
        netloc = f"{userinfo}@{host}"
    query = "&".join(f"{part.split('=', 1)[0]}=***" if "=" in part and _is_password_key(part.split("=", 1)[0])
                     else part for part in parts.query.split("&"))
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _passwords_of(url: str) -> list[str]:
    """Every secret ``url`` holds (password, sslpassword, ...), as written and percent-decoded (longest
    first); also of a URL ``urlsplit`` refuses, whose text libpq may quote in its error."""
    found: list[str] = []
    if _is_uri(url):
        for m in (re.match(r"[^:/?#]*://([^@/?#]*)@", url.strip()), re.match(r"[^:/?#]*://([^/?#]*)@", url.strip())):
            if m and ":" in m.group(1):  # libpq ends the userinfo at the first "@", urlsplit at the last
                found.append(m.group(1).split(":", 1)[1])
        query = url.split("?", 1)[1].split("#", 1)[0] if "?" in url else ""
        found += [part.split("=", 1)[1] for part in query.split("&")
                  if "=" in part and _is_password_key(part.split("=", 1)[0])]
    else:
        for m in _CONNINFO_PAIR.finditer(url):
            if _is_password_key(m.group(1)):
                value = m.group(3)
                found.append(value)
                if value.startswith("'"):
                    found.append(re.sub(r"\\(.)", r"\1", value.strip("'")))
    found += [unquote(pw) for pw in found]
    return sorted({pw for pw in found if pw}, key=len, reverse=True)


def is_postgres_url(url: str | None) -> bool:
    return bool(url) and str(url).split(":", 1)[0].lower() in ("postgres", "postgresql")

