"""The masker against two corpora: secrets (each token family, each command-line form, passwords said in
English and Chinese) must not survive, and ordinary sentences (English and Chinese) must come out byte for byte
unchanged. Every masked output is asserted exactly: a rule that leaks a few characters fails here.

Token samples are assembled from a vendor prefix and a random-looking body, so no file holds a whole token.
"""

from __future__ import annotations

import pytest

from clawmem_core.masking import mask_secrets
from clawmem_core.secret_patterns import FAMILIES

# Random-looking bodies to cut samples from.
_R = ("R8sKq2Vn5TzW0xLm3Yc7Hd1Pf9Jb4Ng6Qa2Ue5Iw8Oy3Xt7Gk1Mz4Bv6Cr0Ds9Fh2Lj5Np8Sq3Tw7Vx1Zy4Ab6Ce9Dg2Ei5Fk8Gm0Ho3"
      "Iq6Js9Ku2Lw5My8Na1Oc4Pe7Qg0Ri3Sk6Tm9Uo2Wq5Xs8Yu1Zw4")
_H = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08e3b0c44298fc1c149afbf4c8996fb924"
_B32 = "Q3EGRT7XWZ4N5PLM"

# (family, token, the token masked, prose about the family that must stay unchanged)
FAMILY_SAMPLES: list[tuple[str, str, str, str]] = [
    ("github", "ghp_" + _R[:36], "ghp_***", "GitHub tokens start with ghp_, gho_, ghu_, ghs_ or ghr_."),
    ("github", "gho_" + _R[1:37], "gho_***", "An OAuth token (gho_) expires when the app is removed."),
    ("github", "ghu_" + _R[2:38], "ghu_***", "ghu_ tokens act for a user of a GitHub App."),
    ("github", "ghs_" + _R[3:39], "ghs_***", "A ghs_ token is an installation token: ghs_ plus 36 characters."),
    ("github", "ghr_" + _R[4:40], "ghr_***", "Refresh tokens (ghr_...) are traded for new ones."),
    ("github-pat", "github_pat_11A" + _R[:20] + "_" + _R[20:79], "github_pat_***",
     "Fine-grained tokens begin with github_pat_ and are longer."),
    ("gitlab", "glpat-" + _R[:20], "glpat-***", "GitLab personal tokens look like glpat-<20 characters>."),
    ("gitlab", "gldt-" + _R[5:25], "gldt-***", "Deploy tokens (gldt-) are read-only here."),
    ("gitlab", "glrt-" + _R[6:26], "glrt-***", "The runner token glrt- prefix came with GitLab 16."),
    ("gitlab", "glft-" + _R[7:27], "glft-***", "A feed token (glft-) opens the RSS feed."),
    ("gitlab", "glsoat-" + _R[8:28], "glsoat-***", "glsoat- marks SCIM OAuth tokens."),
    ("gitlab", "glcbt-64_" + _R[9:29], "glcbt-***", "CI/CD job tokens are glcbt- plus a partition."),
    ("gitlab-runner", "GR1348941" + _R[10:30], "GR1348941***", "Runner registration tokens start GR1348941."),
    ("anthropic", "sk-ant-api03-" + _R[:93] + "-AA", "sk-ant-api03-***", "Anthropic keys begin sk-ant-api03-."),
    ("openai", "sk-proj-" + _R[:40] + "T3BlbkFJ" + _R[40:60], "sk-proj-***",
     "We compared sk-learn baselines; OpenAI project keys start with sk-proj-."),
    ("openai", "sk-" + _R[:20] + "T3BlbkFJ" + _R[20:40], "sk-***", "The legacy sk- keys still work."),
    ("openai", "sk-svcacct-" + _R[5:60], "sk-svcacct-***", "Service accounts get sk-svcacct- keys."),
    ("openai", "sk-or-v1-" + _H[:64], "sk-or-v1-***", "OpenRouter keys are sk-or-v1- and 64 hex digits."),
    ("xai", "xai-" + _R[:80], "xai-***", "xAI keys start with xai- and Grok reads them."),
    ("groq", "gsk_" + _R[:52], "gsk_***", "Groq keys begin gsk_."),
    ("perplexity", "pplx-" + _R[:48], "pplx-***", "Perplexity keys begin pplx-."),
    ("huggingface", "hf_" + _R[:34], "hf_***", "Hugging Face tokens begin hf_ (and hf_hub is a library)."),
    ("replicate", "r8_" + _R[:37], "r8_***", "Replicate tokens look like r8_ and 37 characters."),
    ("langsmith", "lsv2_pt_" + _H[:32] + "_" + _H[32:42], "lsv2_pt_***", "LangSmith keys begin lsv2_pt_."),
    ("google", "AIza" + _R[:35], "AIza***", "AIza is the prefix of Google API keys."),
    ("google-oauth-secret", "GOCSPX-" + _R[:28], "GOCSPX-***", "OAuth client secrets start GOCSPX-."),
    ("google-oauth-token", "ya29." + _R[:60], "ya29.***", "Access tokens (ya29.) last an hour."),
    ("aws-key-id", "AKIA" + _B32, "AKIA***", "Your order number is ASIA2024031500017788, shipped with AKIA1000000000000000."),
    ("aws-key-id", "ASIA" + _B32[::-1], "ASIA***", "We flew to ASIA2026 and AKIAxx was a typo."),
    ("slack", "xoxb-2401937625-5928174410-" + _R[:24], "xoxb-***", "Slack bot tokens (xoxb-) and user tokens (xoxp-)."),
    ("slack", "xoxp-2401937625-5928174410-5928174411-" + _H[:32], "xoxp-***", "The xoxp- token acts as you."),
    ("slack-app", "xapp-1-A0123456789-5928174410-" + _H[:40], "xapp-***", "Socket mode needs an xapp- token."),
    ("slack-webhook", "https://hooks.slack.com/services/T01ABCDEF/B02GHIJKL/" + _R[:24],
     "https://hooks.slack.com/services/***", "Webhooks live under https://hooks.slack.com/services/."),
    ("stripe", "sk_live_" + _R[:24], "sk_live_***", "Stripe keys: sk_live_ and sk_test_ (and rk_live_)."),
    ("stripe", "rk_test_" + _R[3:30], "rk_test_***", "Restricted keys (rk_test_) limit access."),
    ("stripe-webhook", "whsec_" + _R[:32], "whsec_***", "Webhook secrets begin whsec_."),
    ("twilio", "AC" + _H[:32], "AC***", "AC power and SK Telecom are not Twilio ids."),
    ("twilio", "SK" + _H[10:42], "SK***", "API key SIDs start with SK."),
    ("sendgrid", "SG." + _R[:22] + "." + _R[22:65], "SG.***", "SendGrid keys begin SG. and have two dots."),
    ("mailgun", "key-" + _H[:32], "key-***", "A key-value store keeps key-123 pairs."),
    ("mailchimp", _H[:32] + "-us21", "***", "Mailchimp keys end in -us21 or another data centre."),
    ("npm", "npm_" + _R[:36], "npm_***", "npm sets npm_config_cache and npm_package_version."),
    ("pypi", "pypi-AgEIcHlwaS5vcmc" + _R[:70], "pypi-***", "PyPI tokens begin pypi-AgEI; pypi-server is a tool."),
    ("square", "sq0csp-" + _R[:43], "sq0csp-***", "Square secrets begin sq0csp-."),
    ("artifactory", "AKCp" + _R[:69], "AKCp***", "Artifactory API keys begin AKCp."),
    ("digitalocean", "dop_v1_" + _H[:64], "dop_v1_***", "DigitalOcean tokens begin dop_v1_."),
    ("shopify", "shpat_" + _H[:32], "shpat_***", "Shopify admin tokens begin shpat_."),
    ("atlassian", "ATATT3" + _R[:120] + "=0A1B2C3D", "ATATT3***", "Atlassian API tokens begin ATATT3."),
    ("linear", "lin_api_" + _R[:40], "lin_api_***", "Linear keys begin lin_api_."),
    ("notion", "ntn_" + _R[:46], "ntn_***", "Notion tokens begin ntn_ (secret_sauce is a recipe)."),
    ("notion", "secret_" + _R[5:48], "secret_***", "The old integration secret_ tokens still work."),
    ("databricks", "dapi" + _H[:32], "dapi***", "Databricks tokens begin dapi."),
    ("postman", "PMAK-" + _H[:24] + "-" + _H[24:58], "PMAK-***", "Postman keys begin PMAK-."),
    ("vault", "hvs." + _R[:90], "hvs.***", "Vault service tokens begin hvs. and batch ones hvb.."),
    ("sentry", "sntrys_" + _R[:60] + "==", "sntrys_***", "Sentry org tokens begin sntrys_."),
    ("grafana", "glsa_" + _R[:32] + "_" + _H[:8], "glsa_***", "Grafana service account tokens begin glsa_."),
    ("supabase", "sbp_" + _H[:40], "sbp_***", "Supabase tokens begin sbp_."),
    ("doppler", "dp.pt." + _R[:43], "dp.pt.***", "Doppler tokens begin dp.pt. (see dp.st. too)."),
    ("age", "AGE-SECRET-KEY-1" + "QYZ3K8P5W2R7N4T6V9X0MJHGFDSACBE2L8Q3Z7Y5W1N4P6R9T2V5X8K0M3", "AGE-SECRET-KEY-1***",
     "age identities begin AGE-SECRET-KEY-1."),
    ("telegram", "7123456789:AA" + _R[:33], "7123456789:***",
     "Ticket 20260301:resolved-after-the-customer-called-back at 12:30:45."),
    ("discord", "MTA" + _R[:23] + "." + _R[30:36] + "." + _R[40:67], "***", "Version 1.2.3 of the bot was released."),
    ("jwt", "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0." + _R[:43], "***",
     "JWTs start with eyJ because that is base64 for {\"."),
]


def test_every_family_has_a_sample() -> None:
    assert {f.name for f in FAMILIES} == {name for name, *_ in FAMILY_SAMPLES}


@pytest.mark.parametrize("family, token, masked, counter", FAMILY_SAMPLES, ids=[s[0] for s in FAMILY_SAMPLES])
def test_the_whole_token_is_masked(family: str, token: str, masked: str, counter: str) -> None:
    """Nothing of the secret survives, in English and in Chinese prose, and a longer token is masked to its
    end; prose naming the family is left alone."""
    assert mask_secrets(f"here it is: {token} - thanks") == f"here it is: {masked} - thanks"
    assert mask_secrets(f"我的令牌是{token}，谢谢") == f"我的令牌是{masked}，谢谢"
    assert mask_secrets(f"({token})") == f"({masked})"
    assert mask_secrets(counter) == counter


# Keys written with the hyphens a word processor or a chat client substitutes.
@pytest.mark.parametrize("hyphen", ["\u2010", "\u2011", "\u2013", "\u2014", "\u2212"])
def test_keys_with_non_ascii_hyphens_are_masked(hyphen: str) -> None:
    key = f"sk{hyphen}proj{hyphen}" + _R[:48]
    assert mask_secrets(f"use {key} now") == f"use sk{hyphen}proj{hyphen}*** now"
    token = f"glpat{hyphen}" + _R[:20]
    assert mask_secrets(f"token {token}") == f"token glpat{hyphen}***"
    assert mask_secrets(f"xai{hyphen}" + _R[:80]) == f"xai{hyphen}***"
    pem = f"{hyphen * 5}BEGIN OPENSSH PRIVATE KEY{hyphen * 5}\nb3BlbnNzaC1rZXktdjE\n{hyphen * 5}END OPENSSH PRIVATE KEY{hyphen * 5}"
    assert "b3BlbnNzaC1rZXktdjE" not in mask_secrets(pem)


# (text, the text masked): secrets in context, in English and Chinese; each output exact.
SECRETS: list[tuple[str, str]] = [
    # Private key blocks: PEM, OpenSSH, encrypted, PGP (with its armor headers).
    ("key:\n-----BEGIN PGP PRIVATE KEY BLOCK-----\nVersion: GnuPG v2\n\nlQOYBF0aBcDEFgh\n=x9Yz\n"
     "-----END PGP PRIVATE KEY BLOCK-----\ndone",
     "key:\n-----BEGIN PGP PRIVATE KEY BLOCK-----\n…redacted…\n-----END PGP PRIVATE KEY BLOCK-----\ndone"),
    ("-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIFHDBOBgkqhkiG9w0BBQ0wQTAp\n-----END ENCRYPTED PRIVATE KEY-----",
     "-----BEGIN ENCRYPTED PRIVATE KEY-----\n…redacted…\n-----END ENCRYPTED PRIVATE KEY-----"),
    # Headers.
    ("curl -H 'Authorization: Basic dXNlcjpTM2NyM3RQdzA=' https://api.example.com",
     "curl -H 'Authorization: Basic ***' https://api.example.com"),
    ("Authorization: Bearer " + _R[:40], "Authorization: Bearer ***"),
    ('-H "X-API-Key: ' + _R[:32] + '"', '-H "X-API-Key: ***"'),
    ("PRIVATE-TOKEN: " + _R[:20], "PRIVATE-TOKEN: ***"),
    # Command lines.
    ("curl -u admin:S3cr3tPw0rd https://api.example.com/v1", "curl -u admin:*** https://api.example.com/v1"),
    ("curl --user 'deploy:p@ss w0rd!' -X POST https://x.example", "curl --user 'deploy:***' -X POST https://x.example"),
    ("curl -uadmin:hunter22 https://x.example", "curl -uadmin:*** https://x.example"),
    ("mysql -h db -u root -pS3cr3tPw0rd shop", "mysql -h db -u root -p*** shop"),
    ("mysql -u root -p shop", "mysql -u root -p shop"),
    ("mysql --password=S3cr3tPw0rd -u root", "mysql --password=*** -u root"),
    ("mysqldump -uroot -p'my pass' shop > dump.sql", "mysqldump -uroot -p'***' shop > dump.sql"),
    ("docker login -u ci -p S3cr3tPw0rd registry.example.com", "docker login -u ci -p *** registry.example.com"),
    ("docker login --username ci --password S3cr3tPw0rd ghcr.io", "docker login --username ci --password *** ghcr.io"),
    ("echo $TOKEN | docker login --password-stdin ghcr.io", "echo $TOKEN | docker login --password-stdin ghcr.io"),
    ("podman login -p=S3cr3tPw0rd quay.io", "podman login -p=*** quay.io"),
    ("sshpass -p 'S3cr3t Pw' ssh deploy@host", "sshpass -p '***' ssh deploy@host"),
    ("redis-cli -h cache -a r3disPassw0rd ping", "redis-cli -h cache -a *** ping"),
    ("tool --client-secret=" + _R[:30] + " --verbose", "tool --client-secret=*** --verbose"),
    ("psql postgresql://app:S3cr3tPw0rd@db:5432/app", "psql postgresql://app:***@db:5432/app"),
    ("git clone https://oauth2:glpat-" + _R[:20] + "@gitlab.com/x/y.git", "git clone https://oauth2:glpat-***@gitlab.com/x/y.git"),
    ("PGPASSWORD=S3cr3tPw0rd psql -h db", "PGPASSWORD=*** psql -h db"),
    ("$env:OPENAI_API_KEY = \"sk-proj-" + _R[:48] + "\"", "$env:OPENAI_API_KEY = \"sk-proj-***\""),
    # Assignments.
    ("export AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
     "export AWS_SECRET_ACCESS_KEY=***"),
    ("DB_PASSWORD=hunter2", "DB_PASSWORD=***"),
    ("DB_PASSWORD=my_dog_Rex2020 MYSQL_PWD=$ecretPw1", "DB_PASSWORD=*** MYSQL_PWD=***"),
    ("db_password: 'correct horse battery staple'", "db_password: '***'"),
    ("clientSecret = \"x9Yz-" + _R[:20] + "\"", "clientSecret = \"***\""),
    ('{"password": "short", "user": "dana"}', '{"password": "***", "user": "dana"}'),
    ("{'api_key': 'AbC123dEf456GhI789jKl0'}", "{'api_key': '***'}"),
    ("//registry.npmjs.org/:_authToken=" + _H[:8] + "-" + _H[8:12] + "-" + _H[12:16] + "-" + _H[16:20] + "-"
     + _H[20:32], "//registry.npmjs.org/:_authToken=***"),
    ("machine api.example.com login dana password S3cr3tPw0rd", "machine api.example.com login dana password ***"),
    ("DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=" + _R[:86] + "==;EndpointSuffix=core",
     "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=***;EndpointSuffix=core"),
    # AWS: the secret key after its id, on the same line or the next, and named in prose.
    ("AKIA" + _B32 + " wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "AKIA*** ***"),
    ("Access key ID: AKIA" + _B32 + "\nSecret: wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
     "Access key ID: AKIA***\nSecret: ***"),
    ("the aws secret access key is wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY, keep it safe",
     "the aws secret access key is ***, keep it safe"),
    # Said in words.
    ("remember: my password is Tr0ub4dor&3", "remember: my password is ***"),
    ("my password is swordfish, don't tell", "my password is ***, don't tell"),
    ("the password for the wifi is hunter22.", "the password for the wifi is ***."),
    ("her password was changed to N3wPassw0rd!", "her password was changed to ***"),
    ("The PIN is 4921.", "The PIN is ***."),
    ("pw: hunter2", "pw: ***"),
    ("set the wifi password to Hunter22 yesterday", "set the wifi password to *** yesterday"),
    ("I changed my passphrase to purple monkey dishwasher.", "I changed my passphrase to ***."),
    ("client_secret " + _R[:30] + " and CLIENT_SECRET " + _R[30:60], "client_secret *** and CLIENT_SECRET ***"),
    ("the API key is 8f3a9c2e71b44d05a9e6c1f2", "the API key is ***"),
    ("token: ghx7Kq2Vn5TzW0xLm3Yc", "token: ***"),
    # Chinese.
    ("我的密码是 Xk9#mP2$vL", "我的密码是 ***"),
    ("我的密码是Xk9#mP2$vL，别告诉别人。", "我的密码是***，别告诉别人。"),
    ("数据库密码：S3cr3tPw0rd", "数据库密码：***"),
    ("wifi 密码为 hunter2022。", "wifi 密码为 ***。"),
    ("密码改成了吗？改成 abc 了", "密码改成了吗？改成 abc 了"),
    ("他把口令设为 Zq8!vT3x。", "他把口令设为 ***。"),
    ("密钥是 " + _R[:32], "密钥是 ***"),
    ("令牌：" + _R[:24], "令牌：***"),
    ("访问令牌是 ghp_" + _R[:36], "访问令牌是 ghp_***"),
]


@pytest.mark.parametrize("text, masked", SECRETS)
def test_secrets_in_context_are_masked_exactly(text: str, masked: str) -> None:
    assert mask_secrets(text) == masked


# A password said in words: the whole of it, and nothing around it (exact outputs: a rule that keeps a word
# or a few characters of the passphrase fails).
PASSWORDS_IN_WORDS: list[tuple[str, str]] = [
    ("the passphrase is correct horse battery staple", "the passphrase is ***"),
    ("The passphrase is correct horse battery staple.", "The passphrase is ***."),
    ("our wifi passphrase was purple monkey dishwasher, remember it", "our wifi passphrase was ***, remember it"),
    ("the wifi passphrase was: 'purple monkey dishwasher'", "the wifi passphrase was: '***'"),
    ("password = 'correct horse battery staple'", "password = '***'"),
    ("my password is hunter2 and I never change it", "my password is *** and I never change it"),
    ("Password: Tr0ub4dor&3", "Password: ***"),
]


@pytest.mark.parametrize("text, masked", PASSWORDS_IN_WORDS)
def test_passwords_said_in_words_are_masked_whole(text: str, masked: str) -> None:
    assert mask_secrets(text) == masked


# Ordinary sentences: byte for byte unchanged.
PROSE: list[str] = [
    # English: the words of a secret without one.
    "her password was changed",
    "Her password was changed last week, so the old one no longer works.",
    "The password is correct.",
    "The password is stored in the vault, not in the repo.",
    "I forgot my password yesterday and reset it through the website.",
    "Your password must be at least 12 characters long.",
    "the password is in the drawer next to the desk",
    "Token: we met at the cafe on Friday and talked about the launch.",
    "secret: she never told anyone where the treasure was.",
    "Secret: she was planning a surprise party.",
    "The token economy chapter, the secret of good coffee, and a keyboard shortcut list.",
    "the key to the shed is under the mat",
    "The key is to write the tests first.",
    "Key: value pairs are the simplest format.",
    "I like jazz, my favourite colour is blue, and the key is under the mat.",
    # Words that end in "key" or "token" (case-insensitive matches used to eat them).
    "monkey: 3 bananas, whiskey: 12 years, hockey: Saturday, turkey: 6 kg",
    "MONKEY=banana and WHISKEY=scotch are fine",
    "We ate turkey = a family tradition; the jockey = a friend.",
    # Schemas and placeholders.
    "PRIMARY_KEY: id",
    "PRIMARY_KEY: user_id, SORT_KEY: created_at",
    "API_KEY=<your key here>",
    "OPENAI_API_KEY=${OPENAI_API_KEY}",
    "export GITHUB_TOKEN=$GH_TOKEN",
    "API_KEY=your-api-key-here",
    "API_KEY=YOUR_API_KEY and PASSWORD=XXXX and DB_PASSWORD=${PW}",
    "password=None, token=null",
    "self.api_key = api_key",
    "password=settings.DB_PASSWORD",
    "api_key = os.environ['OPENAI_API_KEY']",
    "token = get_token()",
    "max_tokens: 1024, temperature: 0.2",
    "username, password = value",
    "We changed the password to something longer.",
    "Please reset your password to continue.",
    "PRIMARY_KEY id and the api_key argument",
    "pw: see the vault",
    "username, password = request.url.username, request.url.password",
    "api_key = value; webhook_secret = value; api_key = await self._refresh_api_key()",
    "client_secret: ClientSecret",
    "chars_per_token: Number of characters per token to use for the approximation.",
    "last_non_pad_token = (token_indices * non_pad_mask).argmax(-1)",
    "Used to inject `Authorization: Bearer` auth on the API.",
    'META_KEY = "memory_index_meta_v1"',
    'MODEL_KEY = "sentence-transformers/all-MiniLM-L6-v2"',
    'SILENT_REPLY_TOKEN = "NO_REPLY"',
    "CACHE_KEY=user_profile_2024",
    'export CLAWMEM_STORE_URL="postgresql://clawmem:PASSWORD@db.internal/clawmem"',
    "the password in `?password=`, in `?pass%77ord=` and the password was shown in every error",
    "password: str = Field(..., min_length=8)",
    "auth_token: Optional[str] = None",
    "Authorization: Bearer <token>",
    'headers = {"Authorization": f"Bearer {token}"}',
    "API_KEY: sk-... (redacted)",
    "Note: the password is case-sensitive.",
    "PASSWORD_MIN_LENGTH=12 and SECRET_KEY_FILE=/run/secrets/key",
    "KeyError: 'api_key'",
    "sorted(items, key=lambda x: x[1])",
    "Bearer authentication is described in RFC 6750; bearer tokens must be kept secret.",
    "The token is valid for 3600 seconds and the secret is out: we're moving to Berlin.",
    # Numbers and ids that resemble keys.
    "Your order number is ASIA2024031500017788 and ships on Monday.",
    "Invoice AKIA1000000000000000 was paid.",
    "We met on 2026-03-01 and agreed the skeleton plan; sk-short stays; the price is 123456:12.",
    "commit 3f786850e387550fdab836ed7e6dc881de23001b fixed the flaky test; see https://example.com/docs:intro",
    "Call Alice at +1 415 555 0100 or email alice@example.com about the API design review.",
    "The build took 12:30:45 and the PIN code reader is broken.",
    "I pinned the version: pin is the word I used.",
    # Shell commands without secrets.
    "$ mysql -u root -p shop",
    "$ docker login -u dana ghcr.io",
    "$ curl -s https://api.example.com/v1/items | jq .",
    "$ git push origin main && pwd",
    # Chinese: 密码 / 令牌 / 密钥 without a secret.
    "我忘了密码，只好重新设置。",
    "密码是什么？我不记得了。",
    "他说密码是他女儿的生日。",
    "密码要至少十二位。",
    "这个令牌机制很安全，每小时刷新一次。",
    "密钥管理是安全团队的职责。",
    "密钥：请向管理员申请。",
    "口令是：芝麻开门。",
    "我喜欢爵士乐，住在上海。周末我们去了杭州西湖，密切关注天气。",
    "关键是要先写测试，然后再修复问题；秘密花园这本书很好看。",
    "会议定在 2026-03-01，订单号 ASIA2024031500017788。",
]


@pytest.mark.parametrize("text", PROSE)
def test_ordinary_sentences_are_unchanged(text: str) -> None:
    assert mask_secrets(text) == text


def test_a_transcript_mixing_both_keeps_the_prose() -> None:
    text = "\n".join(PROSE + [s for s, _ in SECRETS])
    out = mask_secrets(text)
    assert out.split("\n")[: len(PROSE)] == PROSE
    assert out.endswith("\n".join(m for _, m in SECRETS))
