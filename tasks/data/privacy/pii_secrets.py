"""Secret detection for `tasks.data.privacy.pii`: the regex passes that find credentials, and their validators.

Each pass is `(pattern, validator or None, group to replace (0 = whole match), cheap test that it can match)`;
`pii.scrub_pii` runs them in this order, before emails and digits (a key may hold an `@` or digit groups):
- private-key blocks (`pii_shapes.PEM_PASS`: PEM/OpenSSH/PGP, also with `\\n` escapes inside JSON, without an END line
  and with a diff's or a quoted mail's prefix on each line);
- AWS secret access keys (40 characters after their name, the documentation's example key included);
- vendor token shapes (AWS, GCP, Azure, GitHub, GitLab, Slack, Stripe, Twilio, SendGrid, OpenAI, Anthropic,
  Hugging Face, npm, PyPI, Discord, Telegram, Mailchimp, Shopify, DigitalOcean, Artifactory, SoftLayer URLs,
  JWTs, unsigned ones too): the shapes that
  detect-secrets' plugins know, each led by its literal prefix. detect-secrets itself is not used: it scans
  line by line with every plugin, returns values without positions, and its default plugins ran at 0.09 M
  chars/s on the standard library's code where the whole of `scrub_pii` runs at ~3.5 M chars/s;
- password hashes, `.pgpass` lines, kubeadm bootstrap tokens, `user:password` after `credentials`/`basic_auth`
  and HTTPie's `-a`, presigned URLs' signatures: `tasks.data.privacy.pii_shapes`;
- credentials inside URLs (`postgres://user:PASS@host`, `https://user:TOKEN@github.com`; not a SQL Server URL's
  port and pairs, `jdbc:sqlserver://h:1433;user=sa;password=...`), an Azure SAS URL's `sig=`, and Oracle's
  `user/PASS@db` logins (`jdbc:oracle:thin:`, `sqlplus`);
- HTTP `Authorization:` header values (`Basic`, `Bearer`, `token` and raw);
- login cookies (`Cookie: sessionid=...`, `Set-Cookie:`, `curl -b`) and header directives of web servers and
  proxies (`proxy_set_header X-Api-Key ...;`, `RequestHeader set ...`): `tasks.data.privacy.pii_headers`;
- command-line flags and the tools that take a password (`--password X`, `mysql -pX`, `curl -u user:X`,
  `docker login -p X`, `redis-cli -a X`, `ldapsearch -w X`, `-storepass X`, `htpasswd -b`, `smbclient -U u%X`),
  XML elements and plist entries naming a credential, a password named in prose (`the password is X`);
- a value after a *credential name* (`password`, `secret`, `api_key`, `X-Api-Key`, `GITHUB_TOKEN`, ...) or a
  header that carries one by convention (`Private-Token`, `X-Vault-Token`; not `X-CSRF-Token`), also as a
  call's two arguments (`setRequestHeader("X-Api-Key", "...")`): `tasks.data.privacy.pii_keyed`, its extent
  read from the syntax it sits in (`tasks.data.privacy.pii_values`);
- a credential named apart from its value (`tasks.data.privacy.pii_pairs`): a `name`/`key` field naming one and
  its sibling `value` field (Kubernetes env lists, Postman, HAR, `<add key="ApiKey" value="..."/>`), a Go header
  map's value list, a call's positional password (`NetworkCredential("u", "...")`, `auth=("u", "...")`) and
  `ConvertTo-SecureString "..." -AsPlainText`;
- a random-looking value (entropy, length ≥ 16) after any name containing key/token/secret/password/auth, unless
  the name says it holds no credential (`X-CSRF-Token`, `csrftoken`, `Sec-WebSocket-Key`, `X-Idempotency-Key`).

A secret is replaced whole or not touched, never cut: each pass's value runs as far as its syntax lets it (a
quoted string with its escapes, a shell word, an XML element's text, a header's value without the bracket that
closes around it). What keeps code and documentation intact: placeholders (`${TOKEN}`, `<your-key>`,
`********`, `xxxxxxxx`, `changeme`, `YOUR_API_KEY`, `%s`, an empty value) and code (`token = self.next_token()`,
`key=lambda x: x`, `api_key = settings.API_KEY`, `eos_token = "</s>"`) are not secrets. A value after a
credential name needs a letter and a digit or punctuation; an unquoted one named the way code names variables
(snake/camel case, digits only at the end: `f(password=pw2)`) counts only where it opens the line (`.env`
files), in a URL query or as a flag's, so `s3cr3t` and `hunter2!x` count anywhere. Letters-only values
(`swordfish`) and passphrases that read as prose (two words of letters side by side) are left.
"""

from __future__ import annotations

import re
from typing import Callable

from tasks.data.privacy.pii_devices import (CONFIG_SETS, DECLARED_DEFAULTS, DEVICE_SECRETS, config_set_secret,
                                            declared_default, device_secret, keyword_entry)
from tasks.data.privacy.pii_foreign import (FOREIGN_API_KEY, FOREIGN_PASSWORD, foreign_api_key, foreign_password,
                                            value_span)
from tasks.data.privacy.pii_headers import HEADER_DIRECTIVES, CookieValues, directive_credential, directive_span
from tasks.data.privacy.pii_keyed import CREDENTIAL_NAME, KeyedValues, names_no_credential
from tasks.data.privacy.pii_pairs import NAME_VALUE_PAIRS, POSITIONAL, TABLE_CELLS, positional_credential, positional_span
from tasks.data.privacy.pii_shapes import PEM_PASS, SHAPE_PASSES, plain_base64
from tasks.data.privacy.pii_literals import literal_in
from tasks.data.privacy.pii_values import (is_placeholder, looks_random, masked_after_prefix, shannon_entropy,
                                           trim_end, value_ok)

Validator = Callable[[re.Match[str]], bool]


class Gated:
    """Patterns run one after another, each only when its gate (a literal, or a regex) occurs in the text.

    A pattern led by a literal is found by `re`'s fast literal search and is never tried elsewhere, where one
    alternation of thirty shapes would be tried at every character that can start one (~20x slower on code).
    The patterns of one `Gated` share their group layout, so one validator serves them all."""

    def __init__(self, entries: list[tuple[str | re.Pattern[str], "str | Gated"]]):
        # An entry may be a nested `Gated` under a shared gate (`gh` before ghp_, gho_, ...): fewer scans.
        self.entries = [(gate, pattern if isinstance(pattern, Gated) else re.compile(pattern))
                        for gate, pattern in entries]

    def sub(self, repl: Callable[[re.Match[str]], str], text: str) -> str:
        for gate, pattern in self.entries:
            if literal_in(gate, text) if isinstance(gate, str) else gate.search(text):
                text = pattern.sub(repl, text)
        return text


def _led_by(literals: str, tail: str, gate: str = "") -> list[tuple[str, str | Gated]]:
    """One pattern per literal: the literal, then "no word character or `-` before it", then the tail; all
    under one shared `gate` when given."""
    entries: list[tuple[str, str | Gated]] = [keyword_entry(lit, tail + r"(?![\w-])") for lit in literals.split()]
    return [(gate, Gated(entries))] if gate else entries


_TOKEN_SHAPES = Gated([
    *_led_by("AKIA ASIA ABIA", r"[0-9A-Z]{16}", "IA"), *_led_by("ACCA", r"[0-9A-Z]{16}"),                 # AWS key id
    *_led_by("A3T", r"[A-Z0-9][0-9A-Z]{16}"),
    *_led_by("ghp_ gho_ ghu_ ghs_ ghr_", r"[A-Za-z0-9]{36}", "gh"),                                      # GitHub
    *_led_by("github_pat_", r"[A-Za-z0-9_]{22,255}"),
    *_led_by("glpat- gldt- glft- glsoat- glrt- glcbt- glimt- glptt- glagent- gloas-", r"[A-Za-z0-9_-]{20,1024}", "gl"),
    *_led_by("GR1348941", r"[A-Za-z0-9_-]{20,50}"),                                              # GitLab runner
    *_led_by("xoxa- xoxb- xoxp- xoxo- xoxs- xoxr- xoxe-", r"[A-Za-z0-9-]{10,}", "xox"),                         # Slack
    *_led_by("xapp-", r"\d-[A-Za-z0-9-]{10,}"),
    *_led_by("https://hooks.slack.com/services/", r"T[A-Za-z0-9_]+/B[A-Za-z0-9_]+/[A-Za-z0-9_]+"),
    # Stripe; a `pk_` key is public by design, but names a live merchant account and sits by its `sk_`: scrubbed
    *_led_by("sk_live_ sk_test_ pk_live_ pk_test_ rk_live_ rk_test_", r"[A-Za-z0-9]{16,}", "k_"),
    *_led_by("whsec_", r"[A-Za-z0-9]{24,}"),
    *_led_by("AIza", r"[0-9A-Za-z_-]{35}"), *_led_by("GOCSPX-", r"[A-Za-z0-9_-]{28}"),             # Google
    *_led_by("ya29.", r"[A-Za-z0-9_-]{20,}"),
    *_led_by("AC SK", r"[0-9a-f]{32}"),                                                           # Twilio
    *_led_by("SG.", r"[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}"),                                     # SendGrid
    *_led_by("sk-", r"(?:proj-|svcacct-|admin-|ant-(?:api|admin)\d\d-)?[A-Za-z0-9_-]{20,}"),      # OpenAI, Anthropic
    *_led_by("hf_", r"[A-Za-z0-9]{30,40}"), *_led_by("npm_", r"[A-Za-z0-9]{36}"),                  # HF, npm
    *_led_by("pypi-AgE", r"[A-Za-z0-9_-]{50,}"),                                                  # PyPI macaroon
    *_led_by("shpat_ shpss_ shpca_ shppa_", r"[a-fA-F0-9]{32}", "shp"),                                  # Shopify
    *_led_by("dop_v1_ doo_v1_ dor_v1_", r"[a-f0-9]{64}", "_v1_"),                                         # DigitalOcean
    ("eyJ", Gated([      # JWT; Mapbox's secret token and a 1Password service account's, which hold one
        *_led_by("eyJ", r"[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}(?:\.[A-Za-z0-9_-]{8,}|\.?)"),   # unsigned: `alg: none`
        *_led_by("sk.eyJ", r"[A-Za-z0-9_-]{50,}\.[A-Za-z0-9_-]{20,}"), *_led_by("ops_eyJ", r"[A-Za-z0-9+/=]{250,}")])),
    # Shapes whose distinctive part is inside: tried only when that part occurs.
    ("Q~", r"(?<![\w~.-])[A-Za-z0-9_~.-]{3}\dQ~[A-Za-z0-9_~.-]{31,34}(?![\w~-])"),               # Azure AD secret
    (":AA", r"(?:(?<=bot)|(?<![\w-]))\d{8,10}:AA[A-Za-z0-9_-]{33}(?![\w-])"),         # Telegram bot (in its URL too)
    (re.compile(r"\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27}"),                                        # Discord bot
     r"(?<![\w-])[MNO][A-Za-z0-9_-]{23,25}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,38}(?![\w-])"),
    (re.compile(r"-us\d"), r"(?<![\w-])[0-9a-f]{32}-us\d{1,2}(?![\w-])"),                        # Mailchimp
    # Further shapes from gitleaks' rules, each led by a prefix no word or identifier starts with (not Mailgun's
    # old `key-` + 32 hex: a cache key of an MD5 reads the same).
    *_led_by("xkeysib-", r"[0-9a-f]{64}-[A-Za-z0-9]{16}"),                                      # Brevo
    *_led_by("dp.st. dp.sa. dp.ct. dp.pt. dp.scim. dp.audit.", r"(?:[a-z0-9_-]{2,35}\.)?[A-Za-z0-9]{40,44}",
             "dp."),                                                                             # Doppler
    *_led_by("sq0atp- sq0csp-", r"[A-Za-z0-9_-]{22,43}", "sq0"), *_led_by("EAAA", r"[A-Za-z0-9_-]{60}"),  # Square
    *_led_by("dapi", r"[0-9a-f]{32}(?:-\d)?"), *_led_by("PMAK-", r"[0-9a-f]{24}-[0-9a-f]{34}"),  # Databricks, Postman
    *_led_by("lin_api_", r"[A-Za-z0-9]{40}"), *_led_by("ntn_", r"[A-Za-z0-9]{40,50}"),           # Linear, Notion
    *_led_by("hvs. hvb.", r"[A-Za-z0-9_-]{24,}", "hv"), *_led_by("NRAK-", r"[A-Z0-9]{27}"),      # Vault, New Relic
    *_led_by("glc_ glsa_", r"[A-Za-z0-9_+/=-]{32,}", "gl"), *_led_by("sntrys_", r"[A-Za-z0-9_+/=]{40,}"),  # Grafana
    *_led_by("pul-", r"[0-9a-f]{40}"), *_led_by("sbp_", r"[0-9a-f]{40}"), *_led_by("bkua_", r"[0-9a-f]{40}"),
    *_led_by("pscale_tkn_ pscale_pw_", r"[A-Za-z0-9_.-]{32,64}", "pscale_"),                    # PlanetScale
    *_led_by("ATATT3", r"[A-Za-z0-9_=-]{150,}"),                                                # Atlassian
    *_led_by("AGE-SECRET-KEY-1", r"[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}"),                    # age
    *_led_by("AAAAAAAAAAAAAAAAAAAAA", r"[A-Za-z0-9%]{30,}"),                                   # Twitter bearer
    (".atlasv1.", r"(?<![\w-])[a-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=-]{60,70}(?![\w-])"),           # Terraform
    # Shapes added with a literal of their own only where common in code and configs: a literal's absence costs
    # a scan of the text (~0.6 ms per MB per round).
    *_led_by("AKCp", r"[A-Za-z0-9]{60,80}"),                                                  # Artifactory API key
    *_led_by("api.softlayer.com/soap/v3", r"(?:\.1)?/[a-z0-9]{64}"),                              # SoftLayer API URL
    *_led_by("dckr_pat_", r"[A-Za-z0-9_-]{27,}"), *_led_by("gsk_", r"[A-Za-z0-9]{52}"),    # Docker Hub, Groq
    *_led_by("HRKU-AA", r"[A-Za-z0-9_-]{58}"), *_led_by("LTAI", r"[A-Za-z0-9]{20}"),        # Heroku, Alibaba
    *_led_by("https://discord.com/api/webhooks/ https://discordapp.com/api/webhooks/",      # Discord webhook
             r"\d{17,20}/[A-Za-z0-9_-]{60,68}", "/api/webhooks/"),
])

# An AWS secret access key: 40 base64 characters after its name. Its own pass because AWS's documentation key
# (`wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY`) reads as a placeholder to the generic rule, and it is the one a
# copied config or a planted test carries; the name and the exact length keep it from matching anything else.
_AWS_SECRET = re.compile(r"(?i:aws[_.-]?secret[_.-]?(?:access[_.-]?)?key|secret[_.-]?access[_.-]?key)[\"']?[ \t]*"
                         r"(?:=>|:=|[:=])[ \t]*[\"']?([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])")

# A shared access signature's `sig=` (Azure's, with an `sv=` version before it in the same URL or connection
# string): whoever holds the URL has the access it grants.
_SIGNATURE = Gated([
    ("sig=", r"sig=(?<=[?&;]sig=)([A-Za-z0-9%+/=]{20,200})(?=[&;\"'\s<>)]|$)"),
])
_SAS_VERSION = re.compile(r"[?&;=]sv=\d{4}-\d\d-\d\d")


def _signature(m: re.Match[str]) -> bool:
    return _SAS_VERSION.search(m.string, max(0, m.start() - 400), m.start()) is not None


# An Oracle login `user/PASSWORD` (JDBC's thin URL `jdbc:oracle:thin:scott/tiger@//host`, `sqlplus scott/tiger@db`):
# only the password is replaced.
_ORACLE_LOGIN = Gated([
    ("thin:", r"thin:(?<=:oracle:thin:)[A-Za-z][\w$#]{0,30}/(?P<bare>[^\s@/'\"]{1,128})@"),
    ("sqlplus", r"sqlplus(?<![\w]sqlplus)(?:[ \t]+-[A-Za-z]+)*[ \t]+[\"']?[A-Za-z][\w$#]{0,30}/"
                r"(?P<bare>[^\s@/'\"]{1,128})(?=[@\s\"']|$)"),
])

# `scheme://user:PASSWORD@host` (or `redis://:PASSWORD@host`, no user): only the password is replaced.
_URL_CREDENTIALS = Gated([("://", r"://(?<=[A-Za-z0-9+.-]://)[^\s:/@'\"<>]{0,64}:([^\s@/'\"<>]{1,128})@(?=[\w\[])"),
                          # an address as the URL's user (`ftp://ops@acme.io:PASSWORD@ftp.acme.io/`, unencoded)
                          ("://", r"://(?<=[A-Za-z0-9+.-]://)[^\s:/@'\"<>]{1,64}@[^\s:/@'\"<>]{1,64}"
                                  r":([^\s@/'\"<>]{1,128})@(?=[\w\[])"),
                          # a token as the URL's user: a Sentry DSN's key, `https://ghp_...@github.com/o/r.git`
                          ("://", r"://(?<=[A-Za-z0-9+.-]://)([A-Za-z0-9_~-]{20,128})@(?=[\w\[])"),
                          # Go's MySQL DSN: `user:password@tcp(host:3306)/db` (also `unix(...)`)
                          ("@tcp(", r"(?<![\w.-])[\w.-]{1,64}:([^\s@/'\"<>:]{1,128})@tcp\("),
                          ("@unix(", r"(?<![\w.-])[\w.-]{1,64}:([^\s@/'\"<>:]{1,128})@unix\(")])

# Okta's `SSWS`, Splunk's, Opsgenie's `GenieKey`, Kerberos/NTLM's `Negotiate`/`NTLM` (a base64 blob naming the user)
_AUTH_SCHEMES = ("basic", "bearer", "token", "bot", "apikey", "sso-key", "key", "ssws", "splunk", "geniekey",
                 "negotiate", "ntlm")
_AUTH_VALUE = (r"[\"']?[ \t]*[:=][ \t]*[\"']?(?:((?i:" + "|".join(_AUTH_SCHEMES) + r"))[ \t]+)?"
               r"([^\s\"'`]{6,400})")      # group 1: the scheme, group 2: the credential (`_auth_span` ends it)
_AUTHORIZATION = Gated([  # `Authorization`, `Proxy-Authorization`, `AUTHORIZATION` (not `unauthorization`)
    ("uthorization", r"uthorization(?<![\w][Aa]uthorization)(?<=[Aa]uthorization)" + _AUTH_VALUE),
    ("UTHORIZATION", r"UTHORIZATION(?<![\w]AUTHORIZATION)(?<=AUTHORIZATION)" + _AUTH_VALUE),
])
_BEARER = re.compile(r"Bearer[ \t]+([A-Za-z0-9+/_.~-]{16,}=*)(?![\w.~+/=-])")

# A command-line flag naming a credential and its value after a space (`--password hunter2x`, `--api-key ...`,
# `--token ...`; the `=` form is `KeyedValues`'), and the tools whose short flag takes a password: `mysql
# -pSECRET` (glued: with a space mysql prompts and reads the next word as a database), `sshpass -p SECRET`,
# `curl -u user:SECRET`, `docker login -p SECRET` (any tool's `login`), `redis-cli -a SECRET`, `ldapsearch -w
# SECRET`, keytool's `-storepass`/`-keypass SECRET`, `htpasswd -b file user SECRET`, `smbclient -U user%SECRET`.
_VALUE = r"""(?:"(?P<dq>(?:[^"\\\n]|\\.){1,200})"|'(?P<sq>[^'\n]{1,200})'|(?P<bare>[^\s"'`;&|<>()]{1,200}))"""
_CLI_FLAG = Gated([("--", r"--(?<![\w-]--)(?P<name>[A-Za-z][A-Za-z0-9_-]{1,40})[ \t]+" + _VALUE)])
# quoted only (`identified by their email` is prose); `bare` never matches, for `_value`'s group layout
_SQL_STRING = r"""(?:'(?P<sq>[^'\n]{1,200})'|"(?P<dq>(?:[^"\\\n]|\\.){1,200})"|(?P<bare>(?!)))"""
_COMMAND_PASSWORD = Gated([
    # SQL: MySQL's `CREATE USER ... IDENTIFIED BY '...'` (and `ALTER USER`, `SET PASSWORD ... = '...'`)
    ("IDENTIFIED", r"IDENTIFIED(?<![\w]IDENTIFIED)[ \t]+(?:WITH[ \t]+\w+[ \t]+)?BY[ \t]+" + _SQL_STRING),
    ("identified", r"identified(?<![\w]identified)[ \t]+(?:with[ \t]+\w+[ \t]+)?by[ \t]+" + _SQL_STRING),
    ("mysql", r"mysql(?<![\w]mysql)(?:dump|admin|import|show|check|slap)?\b[^\n|;&]{0,200}?[ \t]-p(?=[^\s-])" + _VALUE),
    ("sshpass", r"sshpass(?<![\w]sshpass)\b[^\n|;&]{0,200}?[ \t]-p[ \t]*" + _VALUE),
    ("curl", r"curl(?<![\w]curl)\b[^\n|;&]{0,200}?[ \t](?:-u|--user)[ \t=]*['\"]?[^\s:'\"]{1,64}:"
             r"(?P<bare>[^\s'\"@]{1,200})"),
    # the `login` subcommand of registry and cloud clients (`docker login -u bob -p ...`, `az login`, `oc login`,
    # `cf login`); the value needs a letter
    ("login", r"login(?:" + "|".join(f"(?<={tool} login)" for tool in ("docker", "podman", "buildah", "nerdctl",
                                                                        "registry", "oras", "skopeo", "az", "oc",
                                                                        "cf", "crane"))
              + r")\b[^\n|;&]{0,200}?[ \t]-p[ \t]+(?=[\"']?[^\s\"']*[A-Za-z])" + _VALUE),
    ("redis-cli", r"redis-cli(?<![\w-]redis-cli)\b[^\n|;&]{0,200}?[ \t]-a[ \t]+" + _VALUE),
    ("ldap", r"ldap(?<![\w-]ldap)(?:search|modify|add|delete|whoami|passwd|compare|modrdn)\b[^\n|;&]{0,200}?"
             r"[ \t]-w[ \t]+" + _VALUE),
    *((f"{kind}pass", rf"{kind}pass(?:" + "|".join(f"(?<=[ \t]-{prefix}{kind}pass)"
                                                   for prefix in ("", "src", "dest", "new")) + r")[ \t]+" + _VALUE)
      for kind in ("store", "key")),
    # `htpasswd -b[c] FILE USER PASSWORD`, `htpasswd -nb USER PASSWORD` (`-b`: the password on the command line)
    ("htpasswd", r"htpasswd(?<![\w-]htpasswd)[ \t]+(?=(?:-[A-Za-z]+[ \t]+)*-[A-Za-z]*b)"
                 r"(?:(?=(?:-[A-Za-z]+[ \t]+)*-[A-Za-z]*n)(?:-[A-Za-z]+[ \t]+)+"
                 r"|(?:-[A-Za-z]+[ \t]+)+[^\s-]\S*[ \t]+)[^\s-]\S*[ \t]+" + _VALUE),
    ("smbclient", r"smbclient(?<![\w-]smbclient)\b[^\n|;&]{0,200}?[ \t](?:-U|--user)[ \t=]*['\"]?[^\s%'\"]{1,64}%"
                  r"(?P<bare>[^\s'\"]{1,200})"),
])
# An XML/HTML element or a property-list entry naming a credential: `<password>...</password>`, `<apiKey>`,
# `<ns:secret>`; `<key>Password</key><string>...</string>`.
_XML_ELEMENT = Gated([      # a literal `<` first (a fast scan), the name ending in a credential word
    ("</", r"<(?=[A-Za-z])(?P<name>[\w.:-]{0,40}?(?i:pass(?:word|wd|phrase)?|pwd|secret|token|key))"
           r"(?:[ \t][^<>\n]{0,200})?>(?P<bare>[^<\n]{1,200})</(?P=name)>"),
    ("</key>", r"<key>(?P<name>[^<>\n]{1,40})</key>\s{0,40}<string>(?P<bare>[^<\n]{1,200})</string>"),
])


# A password named in prose: `the password is hunter2x`, `login with password Tr0ub4dor&3` (after `:` or `=` it
# is `KeyedValues`'). The value needs a digit: `the password is secret` or `password manager` stay prose. A chat's
# or a ticket's words between: `password reset to x1`, `the password for the shared box is x1`.
_PROSE_PASSWORD = Gated([(word, re.escape(word) + rf"(?<![\w]{re.escape(word)})"
                          r"(?:[ \t]+(?:for(?:[ \t]+[^\s]+){1,4}?[ \t]+(?:is|was)|is|was"
                          r"|(?:set|changed|reset)[ \t]+to))?"
                          r"[ \t]+(?:\"(?P<dq>[^\"\n]{6,64})\"|'(?P<sq>[^'\n]{6,64})'"
                          r"|(?P<bare>[^\s\"'`]{6,64}?)[.,;:!?)]*(?=\s|$|\\[nr]))")
                         for word in ("password", "Password", "PASSWORD", "passphrase", "Passphrase", "passcode")])
_NOT_A_PASSWORD = re.compile(r"(?i)(?:sha|md|crc|rc|aes|argon|pbkdf|utf|base|oauth|ssl|tls|rsa|des)[-_]?\d+[\w-]*"
                             r"|\d+[+-]?(?:char\w*|digits?|bits?|bytes?|x)?|v\d+(?:\.\d+)*")


def _prose_password(m: re.Match[str]) -> bool:
    value, _ = _value(m)
    return any(c.isdigit() for c in value) and value_ok(value, quoted=True) and not _NOT_A_PASSWORD.fullmatch(value)


def _value_group(m: re.Match[str]) -> tuple[int, int]:
    """The span of the value (quoted or bare), relative to the match."""
    group = next(g for g in ("dq", "sq", "bare") if g in m.re.groupindex and m.group(g) is not None)
    return m.start(group) - m.start(), m.end(group) - m.start()


def _value(m: re.Match[str]) -> tuple[str, bool]:
    start, end = _value_group(m)
    return m.group()[start:end], m.group("bare") is None


def _cli_flag(m: re.Match[str]) -> bool:
    value, quoted = _value(m)
    name = m.group("name")
    return (CREDENTIAL_NAME.fullmatch(name) is not None or name.lower() in ("token", "auth-token")) and \
        not value.startswith("-") and value_ok(value, quoted)


def _command_password(m: re.Match[str]) -> bool:
    value, quoted = _value(m)            # any value a tool reads as its password, if no placeholder
    return len(value) >= 4 and not value.startswith("-") and not is_placeholder(value, quoted)


def _xml_element(m: re.Match[str]) -> bool:
    name, value = m.group("name").rsplit(":", 1)[-1].replace(" ", "_"), m.group("bare")
    if CREDENTIAL_NAME.fullmatch(name):
        return value_ok(value.strip(), quoted=True)
    # `<token>` and `<key>` elements also hold words (a tokenizer's output, a dictionary's keys): random only.
    return name.lower() in ("token", "key") and looks_random(value)


# A long value after `:` or `=`; the name before it must contain key/token/secret/password... (checked by
# `_KEY_BEFORE` in the validator). `=` only as base64 padding at the end: `say: AWS_KEY=...` must not swallow
# the next `name=value` as one value.
# It must end where the value does (a space, a quote, a delimiter): `...16 chars...!x` is one value, not a token.
_KEYED = re.compile(r"[:=][ \t]*[\"']?([A-Za-z0-9+/_.~-]{16,}={0,3})(?=[\s\"'`,;)\]}>&#]|$)")
# The credential word must start a part of the name: after a non-letter (`api_key`, `x-api-key`), at a camel-case
# hump (`apiKey`) or after a qualifier in one lower- or upper-case word (`apikey`, `SECRETKEY`); `monkey`,
# `turkey`, `whiskey` end in "key" and are no credentials.
_KEY_BEFORE = re.compile(
    r"(?:(?i:(?<![a-z])(?:key|token|secret|password|passwd|pwd|passphrase|credentials?|auth)"
    r"|(?<![a-z])(?:api|access|secret|private|client|auth|app|session|refresh|bearer|master|github|gitlab|slack|npm)"
    r"(?:key|token|secret)|(?<![a-z])oauth)"
    r"|(?<=[a-z0-9])(?:Key|Token|Secret|Password|Passwd|Pwd|Passphrase|Credentials?|Auth))"
    r"(?:[_-][A-Za-z0-9]+)*[\"']?[ \t]*$")
_CODE_CHAIN = re.compile(r"[A-Za-z_][A-Za-z_]*(?:\.[A-Za-z_][A-Za-z_]*)*\.[A-Za-z_][A-Za-z_]*\d*")
_NAME_BEFORE = re.compile(r"([A-Za-z0-9_.-]+)[\"']?\]?[ \t]*$")


# A vendor prefix before lower-case words (`xoxb-your-token-here`, `sk_live_yourstripekey`, `glpat-replace-me-now`):
# documentation's stand-in for a token. Real ones are random: digits or capitals in any 10 of their characters.
_WORDS_AFTER_PREFIX = re.compile(r"[A-Za-z0-9]+[_-](?:[a-z]+_)?(?P<rest>[a-z]+(?:[_-][a-z]+)*)")


def _token_shape(m: re.Match[str]) -> bool:
    value = m.group()
    words = _WORDS_AFTER_PREFIX.fullmatch(value)
    if masked_after_prefix(value, glued=True):
        return False
    if words and (is_placeholder(words["rest"]) or re.search(r"[_-]", words["rest"])):
        return False
    if value.startswith("sk-"):
        return looks_random(value[3:])
    if value.startswith("hf_"):         # letters only in HF's tokens: demand both cases, not `hf_` + a word
        rest = value[3:]
        return any(c.isupper() for c in rest) and any(c.islower() for c in rest)
    if value[:2] in ("AC", "SK") or "Q~" in value or value[0] in "MNO" and "." in value:
        return looks_random(value.replace("Q~", "").replace(".", "")) or shannon_entropy(value) >= 3.5
    return True


# `jdbc:sqlserver://host:1433;user=sa;password=...@x;` is a port and a connection string's pairs, not a user and
# a password: its `password=` pair is `KeyedValues`'.
_PAIRS_INSIDE = re.compile(r";[A-Za-z][\w ]{0,40}=")


def _url_credentials(m: re.Match[str]) -> bool:
    # `:<password>@`, `:${DB_PASS}@`, `:****@` are placeholders; a user without a password is a token only when
    # it looks random (`https://x-access-token@`, `ssh://git@` are names)
    if m.string[m.start(1) - 1] == "/":
        return looks_random(m.group(1)) and not is_placeholder(m.group(1), quoted=True)
    return not is_placeholder(m.group(1), quoted=True) and _PAIRS_INSIDE.search(m.group(1)) is None


def _authorization(m: re.Match[str]) -> bool:
    value = m.string[m.start(2):trim_end(m.string, m.start(2), m.end(2))]
    # `Authorization: Required`; SigV4's scheme `AWS4-HMAC-SHA256` (its `Credential=` and `Signature=`: the shapes')
    if is_placeholder(value) or re.fullmatch(r"[A-Za-z][a-z]+", value) or value.startswith("AWS4-HMAC-"):
        return False
    if m.group(1) is None and (any(c in value for c in "()[]") or _CODE_CHAIN.fullmatch(value)):
        return False                        # `authorization = self.headers.get(...)`: code, not a header
    return any(not c.isalpha() for c in value) or any(c.isupper() for c in value[1:])


def _auth_span(m: re.Match[str]) -> tuple[int, int]:
    """The credential of a header, without a closing bracket or a sentence's punctuation it does not own."""
    return m.start(2) - m.start(), trim_end(m.string, m.start(2), m.end(2)) - m.start()


def _keyed(m: re.Match[str]) -> bool:
    if not looks_random(m.group(1)) or _KEY_BEFORE.search(m.string, max(0, m.start() - 64), m.start()) is None:
        return False
    name = _NAME_BEFORE.search(m.string, max(0, m.start() - 64), m.start())
    return (name is None or not names_no_credential(name.group(1))) and not plain_base64(m.group(1))  # X-CSRF-Token


def _hint(*needles: str) -> Callable[[str], bool]:
    return lambda text: any(needle in text for needle in needles)


def _always(text: str) -> bool:     # a `Gated` pass checks its own gates
    return True


# (pattern, validator, group to replace or a function of the match giving it, cheap test that it can match)
SECRET_PASSES: tuple[tuple[re.Pattern[str], Validator | None,
                           int | Callable[[re.Match[str]], int | tuple[int, int]], Callable[[str], bool]], ...] = (
    PEM_PASS,
    (_TOKEN_SHAPES, _token_shape, 0, _always),
    (_AWS_SECRET, lambda m: shannon_entropy(m.group(1)) >= 3.5, 1, _hint("ecret", "ECRET")),
    *SHAPE_PASSES,      # password hashes, .pgpass lines, `credentials: user:pass`, presigned URLs' signatures
    (_URL_CREDENTIALS, _url_credentials, 1, _always),
    (_SIGNATURE, _signature, 1, _always),
    (_ORACLE_LOGIN, _command_password, _value_group, _always),
    (_AUTHORIZATION, _authorization, _auth_span, _always),
    (_BEARER, lambda m: looks_random(m.group(1)), 1, _hint("Bearer")),
    (_CLI_FLAG, _cli_flag, _value_group, _always),
    (_COMMAND_PASSWORD, _command_password, _value_group, _always),
    (Gated(DEVICE_SECRETS), device_secret, 1, _always),          # `enable secret 9 $9$...`, `snmp-server ...`
    (Gated(CONFIG_SETS), config_set_secret, 2, _always),         # `aws configure set aws_secret_access_key ...`
    (Gated(DECLARED_DEFAULTS), declared_default, value_span, _always),   # `variable "db_password" {default = ...}`
    (_XML_ELEMENT, _xml_element, _value_group, _always),
    (_PROSE_PASSWORD, _prose_password, _value_group, _always),
    *((gated, foreign_password, value_span, _always) for gated in FOREIGN_PASSWORD),    # `mot de passe : ...`
    *((gated, foreign_api_key, value_span, _always) for gated in FOREIGN_API_KEY),      # `clé API : ...`
    (CookieValues(), None, 0, _always),     # before `KeyedValues`: `auth_token=a&b=1` in a cookie is one value
    (KeyedValues(), None, 0, _always),
    (NAME_VALUE_PAIRS, None, 0, _always),     # `- name: DB_PASSWORD` / `value: ...`, `<add key=... value=.../>`
    (POSITIONAL, positional_credential, positional_span, _always),      # `NetworkCredential("u", "...")`
    (TABLE_CELLS, None, 0, _always),                                    # `| api_key | ... |`, `api_key,...`
    (HEADER_DIRECTIVES, directive_credential, directive_span, _always),
    (_KEYED, _keyed, 1, _hint(":", "=")),
)
