"""PII named in languages other than English, and layouts a probe of crawl, chat, mail and config text found
missed (402 planted lines: recall 0.74; most misses were cue words outside English). Expected outputs are written
by hand; each case failed before its fix unless marked "kept"."""

from __future__ import annotations

import pytest

from tests.helpers.pii_cases import assert_scrubbed


_case = assert_scrubbed


@pytest.mark.parametrize("text, expected", [
    ("mot de passe : Soleil#2023", "mot de passe : <SECRET>"), ("MOT DE PASSE : Soleil#2023", "MOT DE PASSE : <SECRET>"),
    ("contraseña: Gato_1234", "contraseña: <SECRET>"), ("hasło: Kot2024!x", "hasło: <SECRET>"),
    ("lösenord: Sommar2024", "lösenord: <SECRET>"), ("パスワード：Sakura2024!", "パスワード：<SECRET>"),
    ("비밀번호: Hangul2024!", "비밀번호: <SECRET>"), ("密码：abc123456，请勿泄露", "密码：<SECRET>，请勿泄露"),
    ("كلمة المرور: Cairo2024!", "كلمة المرور: <SECRET>"), ("पासवर्ड: Delhi@2024", "पासवर्ड: <SECRET>"),
    ("Ihr neues Kennwort lautet: Mx7#pQ2z", "Ihr neues Kennwort lautet: <SECRET>"),
    ("Mon mot de passe est Soleil2023!", "Mon mot de passe est <SECRET>"),
    # unspaced scripts: the word inside a sentence, its verb glued to it
    ("我的密码是abc12345", "我的密码是<SECRET>"), ("パスワードはSakura2024です", "パスワードは<SECRET>です"),
    ("비밀번호는 Hangul2024!", "비밀번호는 <SECRET>"),
    ("我的API密钥是Zx8Kq2Lm9Pv4Rt7Wn1Bc5Df0Gh3Jk6Ls8Ae2Q", "我的API密钥是<SECRET>"), ("密码是什么？", None),
    ("Hier ist mein API-Schlüssel: Zx8Kq2Lm9Pv4Rt7Wn1Bc5Df0Gh3Jk6Ls8Ae2Q", "Hier ist mein API-Schlüssel: <SECRET>"),
    ("Voici ma clé API : Zx8Kq2Lm9Pv4Rt7Wn1Bc5Df0Gh3Jk6Ls8Ae2Q", "Voici ma clé API : <SECRET>"),
    ("mi clave de API es Zx8Kq2Lm9Pv4Rt7Wn1Bc5Df0Gh3Jk6Ls8Ae2Q", "mi clave de API es <SECRET>"),
    ("APIキー：Zx8Kq2Lm9Pv4Rt7Wn1Bc5Df0Gh3Jk6Ls8Ae2Q", "APIキー：<SECRET>"),
    ("API 密钥: Zx8Kq2Lm9Pv4Rt7Wn1Bc5Df0Gh3Jk6Ls8Ae2Q", "API 密钥: <SECRET>"),
    ("Authorization: SSWS 00Zx8Kq2Lm9Pv4Rt7Wn1Bc5Df0Gh3Jk6Ls8Ae2Qi4", "Authorization: SSWS <SECRET>"),
    ("kubectl create secret generic db --from-literal=password=Kx8!qz2Lp --from-literal=user=bob",
     "kubectl create secret generic db --from-literal=password=<SECRET> --from-literal=user=bob"),
    ("docker build --build-arg=NPM_TOKEN=npm_a8Kq2Lm9Pv4Rt7Wn1Bc5Df0Gh3Jk6Ls8Ae2Qi4 .",
     "docker build --build-arg=NPM_TOKEN=<SECRET> ."),
    # kept: no digit, a rule, a placeholder, a prompt, a keyword
    ("mot de passe : 8 caractères minimum", None), ("contraseña: mínimo 8 caracteres", None),
    ("Mot de passe oublié ?", None), ("パスワードを忘れた場合", None), ("密码长度至少8位", None),
    ("la parola chiave python3 è utile", None), ("mot de passe : ********", None),
    ("contraseña: <tu contraseña>", None), ("la clé API est disponible dans le tableau de bord", None),
    ("clé API : votre_cle_api_ici", None),
    # kept: a vendor's prefix and a mask, as documentation writes a key (a real key after the same name goes)
    ("OPENAI_API_KEY=sk-...", None), ("HF_TOKEN=hf_...", None), ("api_key: sk-…", None),
    ("STRIPE_KEY=sk_test_XXXXXXXXXXXXXXXXXXXXXXXX", None),
    ("STRIPE_KEY=sk_test_4eC39HqLyjWDarjtT1zdp7dc", "STRIPE_KEY=<SECRET>"),
])
def test_credentials_named_in_other_languages(text: str, expected: str | None) -> None:
    _case(text, expected)


@pytest.mark.parametrize("text, expected", [
    ("Geb.-Datum: 12.03.1985", "Geb.-Datum: <DOB>"), ("data di nascita: 12/03/1985", "data di nascita: <DOB>"),
    ("geboortedatum: 12-03-1985", "geboortedatum: <DOB>"), ("data urodzenia: 12.03.1985", "data urodzenia: <DOB>"),
    ("data de nascimento: 12 de março de 1985", "data de nascimento: <DOB>"),
    ("تاريخ الميلاد: 12/03/1985", "تاريخ الميلاد: <DOB>"), ("जन्म तिथि: 12/03/1985", "जन्म तिथि: <DOB>"),
    ("BDAY:19850312", "BDAY:<DOB>"), ("Fecha de nac.: 12/03/1985", "Fecha de nac.: <DOB>"),
    ("nata il 12/03/1985 a Roma", "nata il <DOB> a Roma"), ("urodzony 12 marca 1985", "urodzony <DOB>"),
    ("Дата рождения: 12.03.1985", "Дата рождения: <DOB>"), ("fødselsdato: 12.03.1985", "fødselsdato: <DOB>"),
    ("doğum tarihi: 12.03.1985", "doğum tarihi: <DOB>"), ("geboren op 12 maart 1985", "geboren op <DOB>"),
    ("passaporto n. YA1234567", "passaporto n. <PASSPORT>"), ("paspoortnummer NW1234567", "paspoortnummer <PASSPORT>"),
    ("numer paszportu: EA1234567", "numer paszportu: <PASSPORT>"), ("パスポート番号：TK1234567", "パスポート番号：<PASSPORT>"),
    ("여권번호: M12345678", "여권번호: <PASSPORT>"), ("护照号码：E12345678", "护照号码：<PASSPORT>"),
    ("رقم جواز السفر: A12345678", "رقم جواز السفر: <PASSPORT>"), ("पासपोर्ट नंबर: J8369854", "पासपोर्ट नंबर: <PASSPORT>"),
    ("número do passaporte: FZ123456", "número do passaporte: <PASSPORT>"),
    ("आधार संख्या: 4987 6543 2102", "आधार संख्या: <SSN>"), ("आधार कार्ड 4987 6543 2102 है", "आधार कार्ड <SSN> है"),
    # kept: another date's label, no cue, history, a year, no number
    ("Rechnungsdatum: 12.03.1985", None), ("il 12/03/1985 a Roma", None), ("Napoléon, né le 15 août 1769", None),
    ("data di nascita del progetto: 2019", None), ("passaporto scaduto nel 2020", None), ("паспорт РФ", None),
])
def test_dates_of_birth_and_passports_in_other_languages(text: str, expected: str | None) -> None:
    _case(text, expected)


@pytest.mark.parametrize("text, expected", [
    # the bracketed words of other languages, and German's glued `(a)` before a mail TLD
    ("E-Mail: anna.schmidt [ät] gmx [punkt] de", "E-Mail: <EMAIL>"),
    ("Contactez-moi : jean.dupont [arobase] orange [point] fr", "Contactez-moi : <EMAIL>"),
    ("Escríbeme a juan.perez [arroba] gmail [punto] com si tienes dudas", "Escríbeme a <EMAIL> si tienes dudas"),
    ("Bitte schreiben Sie an max.mustermann(a)web.de für Rückfragen.", "Bitte schreiben Sie an <EMAIL> für Rückfragen."),
    # a VERP / SRS bounce address holds the recipient's address: replaced whole (was cut at its `=`)
    ("Return-Path: <bounces+lena.fischer=gmx.de@mailer.example.com>", "Return-Path: <<EMAIL>>"),
    ('Reply-To: "Support" <ticket+8841-lena.fischer=gmx.de@help.zendesk.com>', 'Reply-To: "Support" <<EMAIL>>'),
    ("SRS0=HHH=TT=gmx.de=lena@fwd.example.org", "<EMAIL>"),
    ("GET /?email=ann@example.com&x=1", "GET /?email=<EMAIL>&x=1"),                    # kept: the pair's name
    # kept: code calls, a list item, a noun phrase before `at ... dot com`
    ("x = f(a)obj.method()", None), ("see item (a) above.", None),
    ("Email us via the contact form at example dot com", None), ("Fill in the contact form at example dot com", None),
])
def test_email_forms_of_other_languages_and_bounces(text: str, expected: str | None) -> None:
    _case(text, expected)


@pytest.mark.parametrize("text, expected", [
    # a card in a CSV row before its expiry's fields (`,04,2026`, `,04/26` were read as a decimal's `,04`)
    ("4539391488034369,04,2026,Anna Schmidt,287-65-4321", "<CREDIT_CARD>,04,2026,Anna Schmidt,<SSN>"),
    ("card_no,exp,name\n4539391488034369,04/26,Anna", "card_no,exp,name\n<CREDIT_CARD>,04/26,Anna"),
    ("price 4539391488034369,50 EUR", None),                                           # kept: a decimal
    # German letterheads: the trunk, a spaced slash, the subscriber in groups
    ("Tel.: 030 / 1234 5678 (Mo-Fr 9-17 Uhr)", "Tel.: <PHONE> (Mo-Fr 9-17 Uhr)"),
    ("Telefon: 089 / 123 456 78", "Telefon: <PHONE>"), ("Fax: 0221 / 98 76 54 32", "Fax: <PHONE>"),
    ("pages 850 / 900 / 1800", None), ("Tel: 2019 / 2020", None),                     # kept
])
def test_card_rows_and_slashed_phones(text: str, expected: str | None) -> None:
    _case(text, expected)


@pytest.mark.parametrize("text, expected", [
    # numbers in links: WhatsApp's, a phone-named query parameter, a percent-encoded `+`
    ("https://wa.me/5511987654321?text=oi", "https://wa.me/<PHONE>?text=oi"),
    ("https://api.whatsapp.com/send?phone=5511987654321&text=hi", "https://api.whatsapp.com/send?phone=<PHONE>&text=hi"),
    ("POST /sms?to=%2B4915112345678&body=hi", "POST /sms?to=<PHONE>&body=hi"),
    ("GET /lookup?phone=14155552671 HTTP/1.1", "GET /lookup?phone=<PHONE> HTTP/1.1"),
    ("see https://example.com/wa.me/123", None), ("https://x.org/?page=12345678&tel=0", None), ("v%2B1.2.3", None),
    # a credential's name and value in two cells of a row
    ("| key | value |\n|---|---|\n| api_key | Zx8Kq2Lm9Pv4Rt7Wn1Bc5Df0Gh3Jk6Ls8Ae2Q |",
     "| key | value |\n|---|---|\n| api_key | <SECRET> |"),
    ("api_key,Zx8Kq2Lm9Pv4Rt7Wn1Bc5Df0Gh3Jk6Ls8Ae2Q", "api_key,<SECRET>"), ("password\tTr0ub4dor3x", "password\t<SECRET>"),
    ("api_key,secret_key,region", None), ("| password | `********` |", None), ("monkey,banana12345", None),
    ("| Name | Type | Description |\n| api_key | string | Your API key |", None),
    # a date of birth under its label, on the next line (a form, a PDF's text)
    ("Date of Birth\n12/03/1985", "Date of Birth\n<DOB>"), ("birthday party\n\n12/03/2019 was fun", None),
])
def test_links_table_cells_and_labels_above(text: str, expected: str | None) -> None:
    _case(text, expected)


@pytest.mark.parametrize("text, expected", [
    # a second probe, of whole documents (logs, mail, HTML, code, notebooks, configs, SQL dumps, chats):
    # a pair inside a JSON string kept its string's closing quote (the JSON no longer parsed)
    ('{"Env": ["POSTGRES_PASSWORD=Dc9pZ2qXm", "PATH=/usr/bin"]}', '{"Env": ["POSTGRES_PASSWORD=<SECRET>", "PATH=/usr/bin"]}'),
    # (and its escaped quotes and `\\n` with it: the notebook cell's lines ran together; a third probe)
    ('["password = \\"Hx7kQ2pLm9\\"\\n", "print(1)"]', '["password = \\"<SECRET>\\"\\n", "print(1)"]'),
    ("CREATE USER 'app'@'%' IDENTIFIED BY 'My5ql!Xq7zKp';", "CREATE USER 'app'@'%' IDENTIFIED BY '<SECRET>';"),
    ('dsn := "root:Xk29!aQ7mP@tcp(10.0.4.12:3306)/shop"', 'dsn := "root:<SECRET>@tcp(10.0.4.12:3306)/shop"'),
    ('$m = new mysqli("localhost", "wp_user", "Kj8#mP2qXz", "wordpress");',
     '$m = new mysqli("localhost", "wp_user", "<SECRET>", "wordpress");'),
    ("$db = new PDO('mysql:host=db;dbname=shop', 'shop', 'Nq4!vL7pWx');",
     "$db = new PDO('mysql:host=db;dbname=shop', 'shop', '<SECRET>');"),
    ("  .dockerconfigjson: eyJhdXRocyI6eyJyZWcuaW8iOnsiYXV0aCI6IlpHVndiRzk1T2xKbk55TnJVREoyV0hFNWR3PT0ifX19",
     "  .dockerconfigjson: <SECRET>"),
    ('{"email": "nora.lind\\u0040gmail.com"}', '{"email": "<EMAIL>"}'),
    ('var e = "nora.lind\\x40hotmail.com";', 'var e = "<EMAIL>";'),
    ("Festnetz 040 / 3287 1190", "Festnetz <PHONE>"), ("Fijo: 91 345 67 89", "Fijo: <PHONE>"),
    ("tel. kom. 512 384 917", "tel. kom. <PHONE>"), ("座机：010-6552 9988", "座机：<PHONE>"),
    ("Vendo sofá, llamar al 654 82 17 39. Bizum al 612 938 471.", "Vendo sofá, llamar al <PHONE>. Bizum al <PHONE>."),
    ("appelez-moi au 06 12 34 56 78", "appelez-moi au <PHONE>"),
    # kept: prose, mail ids, version quads after `from`, an address after `from` still goes
    ("the user is identified by their email", None), ("$c = mysqli_connect($host, $user, $pass, $db);", None),
    ("Message-ID: <CAF7x2=9Kq@mail.gmail.com>", None), ("References: <a1@mx.example.org>\n <CAF7x2=9Kq@mail.gmail.com>", None),
    ("Regression from 2.14.1.2", None), ("upgraded from 1.2.3.4 to 1.2.3.5", None),
    ("Failed password from 5.6.7.8 port 22", "Failed password from <IP_ADDRESS> port 22"),
    ("the value al 123 456 789 is", None), ("page 4 au total 12 345 678", None),
])
def test_whole_document_forms(text: str, expected: str | None) -> None:
    _case(text, expected)
