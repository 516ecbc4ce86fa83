"""Credentials that follow no `name = value` syntax, for `tasks.data.privacy.pii_secrets`: network devices'
configuration lines, the CLIs that set a credential by name (`aws configure set aws_secret_access_key ...`) and
infrastructure code's declared defaults (Terraform's `variable "db_password" {... default = "..."}`).
`pii_secrets` runs both lists as `Gated` passes: each pattern is led by its keyword and tried only where it
occurs (as one alternation led by lookbehinds, they cost 300 ms on 1.3 MB of code, half the scrubbing).

Router and switch configurations are pasted whole into forum posts and tickets: Cisco IOS/ASA/NX-OS write
`enable secret 9 $9$...`, `username admin privilege 15 password 7 0822455D0A16`, `snmp-server community ...`,
`crypto isakmp key ... address ...`, `pre-shared-key ...`, `ntp authentication-key 1 md5 ...`, `key-string ...`,
`tacacs-server key ...` — a keyword, an optional encryption type digit (0 clear, 5/8/9 hashes, 7 a reversible
encoding: all of them secrets), then the value.
"""

from __future__ import annotations

import re

from tasks.data.privacy.pii_keyed import is_credential_name
from tasks.data.privacy.pii_values import is_placeholder, value_ok

_TYPE = r"(?:[0-9][ \t]+)?"     # the encryption type before a device's secret (`password 7 ...`)
_VALUE = r"([^\s\"'<>]{4,200})"


def keyword_entry(word: str, tail: str) -> tuple[str, str]:
    """A `pii_secrets.Gated` entry: `word` (re's fast literal search finds it), no word character or `-` before
    it, then `tail`; gated by `word` itself."""
    return word, re.escape(word) + rf"(?<![\w-]{re.escape(word)})" + tail


# (gate, pattern) entries for `pii_secrets.Gated`, the value in group 1; the first two are the type-digit forms
DEVICE_SECRETS = [
    keyword_entry("password", r"[ \t]+[05789][ \t]+" + _VALUE),
    keyword_entry("secret", r"[ \t]+[05789][ \t]+" + _VALUE),
    keyword_entry("snmp-server", r"[ \t]+community[ \t]+" + _VALUE),
    keyword_entry("pre-shared-key", r"[ \t]+" + _TYPE + _VALUE),
    keyword_entry("key-string", r"[ \t]+" + _TYPE + _VALUE),
    keyword_entry("isakmp", r"[ \t]+key[ \t]+" + _TYPE + _VALUE),
    keyword_entry("authentication-key", r"[ \t]+\d+[ \t]+md5[ \t]+" + _TYPE + _VALUE),
    keyword_entry("tacacs-server", r"[ \t]+key[ \t]+" + _TYPE + _VALUE),
    keyword_entry("radius-server", r"[ \t]+key[ \t]+" + _TYPE + _VALUE),
]
# SNMP's factory communities are no secret
_NOT_SECRET = frozenset({"public", "private"})


def device_secret(m: re.Match[str]) -> bool:
    value = m.group(1)
    if value.lower() in _NOT_SECRET or is_placeholder(value, quoted=True):
        return False
    if not m.group().startswith(("password", "secret")):    # a keyword only configurations write
        return True
    # after `password`/`secret` and a digit, a word is prose (`keep it secret 7 days`)
    return not value.isalpha() and not value.isdigit() or len(value) >= 16


# `aws configure set [profile.]aws_secret_access_key VALUE`, `npm config set //registry.npmjs.org/:_authToken VALUE`
# (also yarn's and pnpm's), `git config [--global] credential.password VALUE`, `heroku config:set NAME VALUE`
_SET_TAIL = r"[ \t]+([\w.:/@-]{2,120})[ \t]+([^\s\"'<>]{6,200})"    # the name in group 1, the value in 2
CONFIG_SETS = [
    keyword_entry("aws", r"[ \t]+configure[ \t]+set" + _SET_TAIL),
    *(keyword_entry(tool, r"[ \t]+config[ \t]+set" + _SET_TAIL) for tool in ("npm", "yarn", "pnpm")),
    keyword_entry("git", r"[ \t]+config(?:[ \t]+--(?:global|local|system))?" + _SET_TAIL),
    keyword_entry("heroku", r"[ \t]+config:set" + _SET_TAIL),
]


def config_set_secret(m: re.Match[str]) -> bool:
    name = re.split(r"[.:/]", m.group(1))[-1].lstrip("_")
    return is_credential_name(name) and value_ok(m.group(2), literal=True)


# A variable declared with its default in infrastructure code, the value a literal under another key than the
# name: Terraform's `variable "db_password" { type = string  default = "..." }` (HCL; a description, a type or
# `sensitive = true` may come first) and a CloudFormation template's parameter (`DBPassword:` then, among its
# keys, `Default: ...`). Names in group `name`, values in group `dq` (HCL's quoted string) or `bare` (YAML's
# scalar, quoted or not), the groups `pii_foreign.value_span` reads.
DECLARED_DEFAULTS = [
    keyword_entry("variable", r'[ \t]+"(?P<name>[\w-]{2,120})"[ \t]*\{(?:[^{}"]|"[^"\n]*"){0,600}?'
                              r'(?<![\w-])default[ \t]*=[ \t]*"(?P<dq>[^"\n]{4,200})"'),
    ("Default:", r"(?m)^(?P<indent>[ \t]*)(?P<name>[\w-]{2,120}):[ \t]*\r?\n"
                 # the parameter's other keys, each with its value on its line (a key opening a mapping of its
                 # own, `Parameters:` above the parameters, ends the search)
                 r"(?:(?P=indent)[ \t]+[A-Za-z][\w-]*:[ \t]*[^\s][^\n]*\n){0,8}?"
                 r"(?P=indent)[ \t]+Default:[ \t]*(?P<q>[\"']?)(?P<bare>[^\s\"'#]{4,200})(?P=q)[ \t]*\r?$"),
]
# the declaration marks its value secret, whatever the name: HCL's `sensitive = true`, CloudFormation's `NoEcho`
_MARKED_SECRET = re.compile(r"(?<![\w-])(?:sensitive[ \t]*=[ \t]*true|NoEcho:[ \t]*[\"']?true)")


def declared_default(m: re.Match[str]) -> bool:
    if not value_ok(m.groupdict().get("dq") or m.group("bare"), quoted=True):
        return False
    # HCL may mark the variable after its default: read on to the block's end (`}` at a line's start)
    block_end = m.string.find("\n}", m.end(), m.end() + 600) if m.group().startswith("variable") else -1
    declaration = m.string[m.start():block_end if block_end > 0 else m.end()]
    return is_credential_name(m.group("name")) or _MARKED_SECRET.search(declaration) is not None
