"""A sixth PII probe (seeded, six cases with look-alikes beside each): Google app passwords with many vowels,
tokens with one digit in rows that name no column, a bare phone number or date of birth in a headless person's
row, e-mail addresses hyphenated at a line break, label rows set apart by tabs, and ODBC braced passwords that
open with a blank or hold one. Each test below failed before its fix; `test_control_*` are the look-alikes."""

from __future__ import annotations

import pytest

from tests.helpers.pii_cases import assert_scrubbed


# --- 1. Google app passwords ---------------------------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ("Gmail app password: uoai kelb eatu mfio", "Gmail app password: <SECRET>"),
    ("  app_password: \"qazo iuea mbte roxv\"\n", "  app_password: \"<SECRET>\"\n"),
    ("EMAIL_APP_PASSWORD=qazoiueambteroxv\n", "EMAIL_APP_PASSWORD=<SECRET>\n"),
    ("Here is your app password for your device:\n\n    eoau zikq uvet olam\n\nHow to use it",
     "Here is your app password for your device:\n\n    <SECRET>\n\nHow to use it"),
])
def test_a_vowel_rich_app_password_is_a_secret(text, expected):
    assert_scrubbed(text, expected)


@pytest.mark.parametrize("text", [
    "Password: must have more than twelve characters.",
    "App password: will stop when your Google password changes.",       # was taken before (few vowels)
    "Reply: the password: keep them safe here -- shown once.",
    "EMAIL_APP_PASSWORD=mysecretpassword\n",
])
def test_control_a_phrase_of_words_after_a_password_word_stays(text):
    assert_scrubbed(text, None)


# --- 2. tokens with one digit in rows that name no column ------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ("1001,ana,VdxQBQwiDEC4kQlPtbWvAvgVyfAIWe,2024-01-02,active\n1002,bo,x,2024-01-03,active\n",
     "1001,ana,<SECRET>,2024-01-02,active\n1002,bo,x,2024-01-03,active\n"),
    ("INSERT INTO `sessions` VALUES (1,'JDypAfHMlZA4HATWwNenwYPHyjSuQv','2024-05-01 10:00:00');",
     "INSERT INTO `sessions` VALUES (1,'<SECRET>','2024-05-01 10:00:00');"),
])
def test_a_token_with_one_digit_in_a_headless_row_is_a_secret(text, expected):
    assert_scrubbed(text, expected)


@pytest.mark.parametrize("ident", ["structEndArchive64Locator", "ParseUtf8StringToBufferAsync",
                                   "getOAuth2AccessTokenForCurrentUser", "iPhone6sPlusScreenAdapterView",
                                   "NSURLSessionDataTask2Delegate", "ConvertToBase64UrlSafeEncodingStream"])
def test_control_an_identifier_with_one_digit_run_in_a_row_stays(ident):
    assert_scrubbed(f"1001,{ident},2024-01-02,active\n", None)


# --- 3. a bare phone number or date of birth in a headless person's row -------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ("Ana Silva,ana.silva@gmail.com,2125551234,gold\n", "Ana Silva,<EMAIL>,<PHONE>,gold\n"),
    ("Bo de Vries;bo.devries@web.de;12.03.1979;10432\n", "Bo de Vries;<EMAIL>;<DOB>;10432\n"),
    ("Kenji Tanaka|kenji@fastmail.fm|415.727.1720|1985-03-12|trial\n",
     "Kenji Tanaka|<EMAIL>|<PHONE>|<DOB>|trial\n"),
])
def test_a_phone_or_birth_date_beside_a_name_and_an_address_is_replaced(text, expected):
    assert_scrubbed(text, expected)


@pytest.mark.parametrize("text, expected", [
    # two dates in a person's row: created and updated, no birth
    ("Ana Silva,ana@corp.com,1998-01-05,2004-02-01,42\n", "Ana Silva,<EMAIL>,1998-01-05,2004-02-01,42\n"),
    # a 10-digit number no North American phone (its area code led by 1) stays
    ("Ana Silva,ana@corp.com,1234567890,gold\n", "Ana Silva,<EMAIL>,1234567890,gold\n"),
    # no name: a product's row
    ("SKU-1234,Widget,4006381333,1999-01-01,support@corp.com\n", "SKU-1234,Widget,4006381333,1999-01-01,<EMAIL>\n"),
])
def test_control_other_numbers_and_dates_in_rows_stay(text, expected):
    assert_scrubbed(text, expected)


# --- 4. e-mail addresses hyphenated at a line break ----------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ("Contact: john.smith-\nexample@corp.com for details", "Contact: <EMAIL> for details"),
    ("Contact: john.smith@exam-\nple.com for details", "Contact: <EMAIL> for details"),
    ("(iwhitfield@fastmai-\n   l.fm)", "(<EMAIL>)"),
])
def test_an_address_hyphenated_at_a_line_break_is_replaced_whole(text, expected):
    assert_scrubbed(text, expected)


@pytest.mark.parametrize("text", [
    "This is a well-\nknown result; see the pre-\nprint server arXiv.org",
    "Mirror: www.exam-\nple-mirror.org/files",
    "Install with npm i left-\npad@1.3.0 and retry.",
    "git clone git-\nhub@github.com:org/repo.git",
])
def test_control_hyphenated_words_hosts_and_packages_stay(text):
    assert_scrubbed(text, None)


# --- 5. label rows set apart by tabs ---------------------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ("Name\t\tPhone\t\t\tDate of birth\tPassport No.\nAna Silva\t+44 7262 535190\t\t05.12.1967\tCH8530124\n",
     "Name\t\tPhone\t\t\tDate of birth\tPassport No.\nAna Silva\t<PHONE>\t\t<DOB>\t<PASSPORT>\n"),
    ("Employee        \tMobile          \tBirth date\nAna Silva       \t2125551234      \t1967-12-05\n",
     "Employee        \tMobile          \tBirth date\nAna Silva       \t<PHONE>      \t<DOB>\n"),
    ("ID\tUser\tPassword\tCreated\n1\tana\tKx8qz2Lp9w\t2021-03-04\n",
     "ID\tUser\tPassword\tCreated\n1\tana\t<SECRET>\t2021-03-04\n"),
])
def test_a_value_under_a_tab_separated_label_is_replaced(text, expected):
    assert_scrubbed(text, expected)


@pytest.mark.parametrize("text", [
    "Version\tDate\tBuild\n2.4.1\t2024-05-01\t1234\n",
    "Name\tPassword\tNote\nana\tletmein\tchanged\n",
    "func main() {\n\tfmt.Println(\"phone\")\n\tx := 1\n}\n",
])
def test_control_tab_tables_without_such_values_stay(text):
    assert_scrubbed(text, None)


# --- 6. ODBC braced passwords --------------------------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ("Driver={SQL Server};Server=db;Uid=sa;Pwd={ab cd;ef}}g};Database=x;",
     "Driver={SQL Server};Server=db;Uid=sa;Pwd={<SECRET>};Database=x;"),
    ('cs = "Server=db;User Id=ops;Password={=su H;%vXNikJ#}"', 'cs = "Server=db;User Id=ops;Password={<SECRET>}"'),
    ("UID=svc;pwd={ hky&^!dehqN$};WAREHOUSE=wh", "UID=svc;pwd={<SECRET>};WAREHOUSE=wh"),
])
def test_a_braced_password_with_blanks_is_replaced(text, expected):
    assert_scrubbed(text, expected)


@pytest.mark.parametrize("text", [
    'cs = f"Driver={{SQL Server}};Server=db;Uid=sa;Pwd={pw};"',
    'cs = "Driver={SQL Server};Server=db;Uid=sa;Pwd={0};".format(pw)',
    'cs = $"Server=db;Uid=sa;Password={settings.DbPassword};"',
    "Driver={ODBC Driver 18 for SQL Server};Server={db01;prod};",
    "password = {hunter2}",
])
def test_control_interpolations_and_other_braces_stay(text):
    assert_scrubbed(text, None)
