"""The token families the masker knows by their shape: a vendor prefix and a body.

Each :class:`Family` is one regular expression whose group ``s`` is the secret; what the match holds outside
``s`` (the vendor prefix, ``ghp_``, ``glpat-``, ``sk-proj-``) is not secret and stays, so a masked token
still says what it was: ``ghp_***``. Every family has a real-looking sample and a prose counter-sample in
``tests/core/test_masking_corpus.py``; a family without a sample fails that test.

The table is matched against the text with its non-ASCII hyphens (‐ ‑ ‒ – — −) read as ``-``, so a key
pasted through a word processor is still found.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["FAMILIES", "Family"]



class Family(NamedTuple):
    name: str
    #: the vendor prefix kept in the masked text (a regular expression; may be empty)
    keep: str
    #: the secret itself (group ``s``)
    body: str
    #: the rule runs only when the text contains one of these literals (case-sensitive)
    needles: tuple[str, ...]

    @property
    def pattern(self) -> str:
        """The family's regular expression (the masker also checks that no letter, digit or ``_`` precedes
        a match)."""
        return f"(?:{self.keep})(?P<s>{self.body})"


_ALNUM = "A-Za-z0-9"

FAMILIES: tuple[Family, ...] = (
    # GitHub: classic, OAuth, user-to-server, server-to-server, refresh tokens; fine-grained PATs.
    Family("github", "gh[pousr]_", f"[{_ALNUM}]{{20,}}", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")),
    Family("github-pat", "github_pat_", f"[{_ALNUM}_]{{22,}}", ("github_pat_",)),
    # GitLab: personal, deploy, runner, feed, SCIM/OAuth, CI/CD job, incoming mail, trigger, agent, OAuth app,
    # feature flags tokens; the runner registration token.
    Family("gitlab", "(?:glpat|gldt|glrt|glft|glsoat|glcbt|glimt|glptt|glagent|gloas|glffct)-",
           "[A-Za-z0-9_-]{20,}",
           ("glpat-", "gldt-", "glrt-", "glft-", "glsoat-", "glcbt-", "glimt-", "glptt-", "glagent-", "gloas-",
            "glffct-")),
    Family("gitlab-runner", "GR1348941", "[A-Za-z0-9_-]{20,}", ("GR1348941",)),
    # Anthropic (before OpenAI: both start with sk-).
    Family("anthropic", r"sk-ant-(?:api|admin|sid|oat)\d\d-", "[A-Za-z0-9_-]{20,}", ("sk-ant-",)),
    # OpenAI (user, project, service account, admin keys) and the many providers using sk- (DeepSeek,
    # OpenRouter's sk-or-v1-, ...).
    Family("openai", "sk-(?!ant-)(?:proj-|svcacct-|admin-|or-v1-)?", "[A-Za-z0-9_-]{20,}", ("sk-",)),
    Family("xai", "xai-", f"[{_ALNUM}]{{20,}}", ("xai-",)),
    Family("groq", "gsk_", "[A-Za-z0-9_-]{20,}", ("gsk_",)),
    Family("perplexity", "pplx-", "[A-Za-z0-9_-]{20,}", ("pplx-",)),
    Family("huggingface", "hf_", f"[{_ALNUM}]{{20,}}", ("hf_",)),
    Family("replicate", "r8_", f"[{_ALNUM}]{{30,}}", ("r8_",)),
    Family("langsmith", "lsv2_(?:pt|sk)_", "[a-f0-9]{32}_[a-f0-9]{10}", ("lsv2_",)),
    # Google API keys, OAuth client secrets and access tokens.
    Family("google", "AIza", "[0-9A-Za-z_-]{20,}", ("AIza",)),
    Family("google-oauth-secret", "GOCSPX-", "[A-Za-z0-9_-]{20,}", ("GOCSPX-",)),
    Family("google-oauth-token", r"ya29\.", "[A-Za-z0-9_-]{20,}", ("ya29.",)),
    # AWS access key ids (the 16 characters after the prefix are base32: an order number with 0, 1, 8 or 9
    # in it is not one).
    Family("aws-key-id", "AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9]", "[A-Z2-7]{16}(?![A-Za-z0-9])",
           ("AKIA", "ASIA", "ABIA", "ACCA", "A3T")),
    # Slack bot/user/app tokens and webhooks.
    Family("slack", "xox[abposre]-", "[A-Za-z0-9-]{10,}", ("xox",)),
    Family("slack-app", "xapp-", "[A-Za-z0-9-]{10,}", ("xapp-",)),
    Family("slack-webhook", r"https://hooks\.slack\.com/services/", "[A-Za-z0-9_/]{20,}", ("hooks.slack.com",)),
    # Stripe secret, restricted and publishable keys; webhook signing secrets.
    Family("stripe", "(?:sk|rk|pk)_(?:live|test)_", f"[{_ALNUM}]{{10,}}", ("_live_", "_test_")),
    Family("stripe-webhook", "whsec_", f"[{_ALNUM}]{{20,}}", ("whsec_",)),
    # Twilio account and API key SIDs.
    Family("twilio", "AC|SK", "[0-9a-f]{32}(?![A-Za-z0-9])", ("AC", "SK")),
    Family("sendgrid", r"SG\.", r"[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}", ("SG.",)),
    Family("mailgun", "key-", "[0-9a-f]{32}(?![A-Za-z0-9])", ("key-",)),
    Family("mailchimp", "", r"[0-9a-f]{32}-us\d{1,2}(?![0-9])", ("-us",)),
    Family("npm", "npm_", f"[{_ALNUM}]{{16,}}", ("npm_",)),
    Family("pypi", "pypi-", "AgE[A-Za-z0-9_-]{50,}", ("pypi-",)),
    Family("square", "sq0(?:csp|atp|idp)-", "[0-9A-Za-z_-]{20,}", ("sq0",)),
    Family("artifactory", "AKCp", f"[{_ALNUM}]{{60,}}", ("AKCp",)),
    Family("digitalocean", "do[opr]_v1_", "[a-f0-9]{64}", ("_v1_",)),
    Family("shopify", "shp(?:at|ca|pa|ss)_", "[a-fA-F0-9]{32}", ("shp",)),
    Family("atlassian", "ATATT3", "[A-Za-z0-9_=-]{100,}", ("ATATT3",)),
    Family("linear", "lin_api_", f"[{_ALNUM}]{{30,}}", ("lin_api_",)),
    Family("notion", "ntn_|secret_", f"[{_ALNUM}]{{40,}}", ("ntn_", "secret_")),
    Family("databricks", "dapi", "[a-f0-9]{32}(?![A-Za-z0-9])", ("dapi",)),
    Family("postman", "PMAK-", "[a-f0-9]{24}-[a-f0-9]{34}", ("PMAK-",)),
    Family("vault", r"hv[sbr]\.", "[A-Za-z0-9_-]{24,}", ("hvs.", "hvb.", "hvr.")),
    Family("sentry", "sntry[su]_", "[A-Za-z0-9+/=_-]{30,}", ("sntrys_", "sntryu_")),
    Family("grafana", "glsa_|glc_", "[A-Za-z0-9+/=_-]{32,}", ("glsa_", "glc_")),
    Family("supabase", "sbp_", "[a-f0-9]{40}", ("sbp_",)),
    Family("doppler", r"dp\.(?:pt|st|sa|ct)\.", f"[{_ALNUM}]{{40,}}", ("dp.",)),
    Family("age", "AGE-SECRET-KEY-1", "[0-9A-Z]{58}", ("AGE-SECRET-KEY-",)),
    Family("telegram", r"\d{8,10}:", "AA[A-Za-z0-9_-]{30,}(?![A-Za-z0-9_-])", (":AA",)),
    Family("discord", "", r"[MNO][A-Za-z0-9_-]{23,25}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,}", (".",)),
    # JSON Web Tokens: header, payload and signature.
    Family("jwt", "", r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}(?:\.[A-Za-z0-9_-]*)?", ("eyJ",)),
)
