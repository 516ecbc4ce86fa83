"""Credentials named in languages other than English, for `tasks.data.privacy.pii_secrets`.

The English cues are code's and prose's (`password: ...`, `api_key=...`, `the password is ...`: `pii_keyed`,
`pii_secrets`); German, Dutch and Portuguese password words are among them. A probe of web, chat and support
text found the same values missed after the words other languages use: `mot de passe : Soleil#2023`,
`contraseña: Gato_1234`, `hasło: Kot2024!x`, `パスワード：Sakura2024!`, `密码：abc123456`, `Ihr neues Kennwort
lautet: ...`, `clé API : ...`, `APIキー：...`. Here each word, then optionally a verb (`lautet`, `est`, `es`, `is`,
...), then `:`/`=` (or the full-width `：`) or a space, then the value.

- A password needs a digit, as in English prose (`mot de passe : secret` and `contraseña: mínimo 8 caracteres`
  stay): 6-64 printable ASCII characters (a CJK sentence may run on right after it) or quoted, `value_ok`.
- An API key must look generated (`looks_random`: 16+ characters, digits, entropy).
Only the value is replaced (a trailing `!` with it: it may be the password's). Gates: `Gated`'s, one pair a kind.
"""

from __future__ import annotations

import re

from tasks.data.privacy.pii_personal import Gated
from tasks.data.privacy.pii_values import looks_random, value_ok

_PASSWORD_WORDS = (
    "mot de passe", "contraseña", "contrasena", "hasło", "haslo", "heslo", "jelszó", "parola", "şifre", "sifre",
    "lösenord", "wachtwoord", "kennwort", "passwort", "senha", "пароль", "κωδικός", "mật khẩu", "パスワード",
    "暗証番号", "비밀번호", "密码", "密碼",
    "口令", "كلمة المرور", "كلمة السر", "पासवर्ड")
_API_WORDS = (
    "api-schlüssel", "api schlüssel", "clé api", "clé d'api", "clave de api", "clave api", "chiave api",
    "chave de api", "klucz api", "api anahtarı",
    "api-ключ", "ключ api", "apiキー", "api キー", "api密钥", "api 密钥", "api 키", "api키")
# A verb between the word and the value: German, French, Spanish, Italian, Polish, Swedish, Danish, Dutch, Czech
# (Chinese, Japanese and Korean put theirs right after the word: `密码是`, `パスワードは`, `비밀번호는`)
_VERB = r"(?:[ \t]+(?i:lautet|ist|est|es|era|è|é|jest|to|är|er|is|je|было)|[ \t]*[是为為は는은])?"
_SEPARATOR = r"(?:[ \t]*[:=：][ \t]*|[ \t]+|(?<=[是为為は는은]))"
_VALUE = r"""(?:"(?P<dq>[^"\n]{6,64})"|'(?P<sq>[^'\n]{6,64})'|「(?P<cq>[^」\n]{6,64})」|(?P<bare>[!-~]{6,64}?))"""


_UNSPACED = re.compile("[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]")


def _cue(words: tuple[str, ...]) -> str:
    """The words, longest first, case-insensitive: a word of a spaced script whole (`parola`, not inside
    `parolaccia`), a Chinese, Japanese or Korean one wherever it stands (no spaces around it: `我的密码是...`)."""
    def alternation(group: list[str]) -> str:
        return "|".join(re.escape(w) for w in sorted(group, key=len, reverse=True))
    spaced = [w for w in words if not _UNSPACED.search(w)]
    unspaced = [w for w in words if _UNSPACED.search(w)]
    return rf"(?:(?<![^\W\d_])(?i:{alternation(spaced)})(?![^\W\d_])|(?i:{alternation(unspaced)}))"


_PASSWORD = re.compile(_cue(_PASSWORD_WORDS) + _VERB + _SEPARATOR + _VALUE + r"(?(bare)[.,;:?)]*(?![!-~])|)")
_API_KEY = re.compile(_cue(_API_WORDS) + _VERB + _SEPARATOR + r"[\"'「]?(?P<bare>[A-Za-z0-9_.~+/=-]{16,200})"
                      r"(?![A-Za-z0-9_.~+/=-])")


# Gates (`Gated`): ASCII ones found in any case (`fold`: the text's bytes with ASCII and Latin-1 lowered), the
# others as written, in the cases that occur. A word with a letter outside ASCII is gated as written: an ASCII
# text answers `in` for it at once, while each ASCII gate is a scan of the text (~0.8 ms a MB: 48 of them made
# scrubbing code 12 % slower, these 10 about 4 %). Its ASCII spellings (`contrasena`, `haslo`) go ungated.
_PASSWORD_GATES = ("mot de passe", "parola", "wachtwoord", "wort", "senha", "heslo")
_PASSWORD_WRITTEN = ("contraseña", "Contraseña", "CONTRASEÑA", "hasło", "Hasło", "HASŁO", "jelszó", "Jelszó",
                     "şifre", "Şifre", "ŞİFRE", "lösenord", "Lösenord", "пароль", "Пароль", "ПАРОЛЬ", "κωδικός",
                     "Κωδικός", "ΚΩΔΙΚΌΣ", "mật khẩu", "Mật khẩu", "パスワード", "暗証番号", "비밀번호", "密码", "密碼",
                     "口令", "كلمة المرور", "كلمة السر", "पासवर्ड")
_API_GATES = ("de api", "chiave api", "clave api", "klucz api")
_API_WRITTEN = ("API-Schlüssel", "API Schlüssel", "api-schlüssel", "clé API", "Clé API", "clé api", "CLÉ API",
                "clé d'API", "Clé d'API", "API anahtarı", "APIキー", "API キー", "API密钥", "API 密钥", "API 키", "API키",
                "API-ключ", "ключ API", "Ключ API")
FOREIGN_PASSWORD = (Gated(_PASSWORD, _PASSWORD_GATES, 4), Gated(_PASSWORD, _PASSWORD_WRITTEN, 0, fold=False))
FOREIGN_API_KEY = (Gated(_API_KEY, _API_GATES, 16), Gated(_API_KEY, _API_WRITTEN, 0, fold=False))


def value_span(m: re.Match[str]) -> tuple[int, int]:
    """The value's span (quoted or bare), relative to the match."""
    group = next(g for g in ("dq", "sq", "cq", "bare") if g in m.re.groupindex and m.group(g) is not None)
    return m.start(group) - m.start(), m.end(group) - m.start()


def foreign_password(m: re.Match[str]) -> bool:
    start, end = value_span(m)
    value = m.group()[start:end]
    return any(c.isdigit() for c in value) and value_ok(value, quoted=True)


def foreign_api_key(m: re.Match[str]) -> bool:
    return looks_random(m.group("bare"))
