"""A fifth PII probe (72 documents: folded calendar and mail lines, PDF text with values wrapped onto the next line,
CSV rows and SQL `INSERT`s that name no column, grouped author addresses, fixed-width reports with a row of labels
over the values, and credentials of shapes no keyed pass read) kept 376 of 494 values; with them, national ids
of seven more countries. Hard negatives (digests, UUIDs, versions, number tables, a Slack link) stay."""

from __future__ import annotations

import pytest

from tests.helpers.pii_cases import assert_scrubbed

# --- folded lines (RFC 5545 calendar, RFC 5322 mail) -------------------------------------------------------------
_ICS = "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nBEGIN:VEVENT\r\n{line}\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"


@pytest.mark.parametrize("line, expected", [
    ("ORGANIZER;CN=Org:mailto:wei.whitfield@eecs.b\r\n erkeley.edu", "ORGANIZER;CN=Org:mailto:<EMAIL>"),
    ("DESCRIPTION:Bridge phone +1 212 4\r\n 73 3643 and the room password: vgI\r\n 5rcFEQU7",
     "DESCRIPTION:Bridge phone <PHONE> and the room password: <SECRET>"),
    ("ATTENDEE;CN=Guest:mailto:lukas.hof\r\n fmann@gmail.com", "ATTENDEE;CN=Guest:mailto:<EMAIL>"),
])
def test_a_folded_calendar_line_is_read_unfolded(line, expected):
    assert_scrubbed(_ICS.format(line=line), _ICS.format(line=expected))


def test_a_calendar_uid_is_an_id_not_an_address():
    """Control for the UID rule: `UID:<uuid>@host` is the event's id (it was taken for an address)."""
    assert_scrubbed(_ICS.format(line="UID:0173ae3f-997f-450f-9c1d-ddf63cfee2e7@cal.acme.io"), None)


def test_a_folded_mail_header_value_is_read_with_its_name():
    text = ("From: Ana <ana@example.net>\nTo: bob@example.net\nX-Api-Key:\n xDzaDoLiGJMfen7YZao6th4eSBBPGY2Tlftc1Opn\n"
            "Authorization: Bearer\n  S5ygZKD2BmXKARvH0BQHj8Uu4TixGdonOdON4vxa7Bagw5OJ\nSubject: build 2.8.28\n\nbody\n")
    assert_scrubbed(text, "From: Ana <<EMAIL>>\nTo: <EMAIL>\nX-Api-Key:\n <SECRET>\nAuthorization: Bearer\n  <SECRET>\n"
                          "Subject: build 2.8.28\n\nbody\n")


# --- values wrapped onto the next line (PDF text) -------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ("Card number: 4053 6656\n    6658 1200\nExpiry", "Card number: <CREDIT_CARD>\nExpiry"),
    ("transfer to IBAN DE07 5673 4341\n        5336 4717 64\nThanks", "transfer to IBAN <IBAN>\nThanks"),
    ("Questions? Call us on (312)\n833-5756 weekdays.", "Questions? Call us on <PHONE> weekdays."),
    ("Please call +44 740\n0 645953 today", "Please call <PHONE> today"),
])
def test_a_value_wrapped_onto_the_next_line_goes_whole(text, expected):
    assert_scrubbed(text, expected)


def test_a_table_of_four_digit_groups_is_no_wrapped_card():
    """Control: rows of 4-digit numbers under a card word that do not pass Luhn as one stay."""
    assert_scrubbed("Card totals  4053 6656\n    6658 1201\n", None)


# --- rows that name no column ----------------------------------------------------------------------------------
def test_a_random_token_in_a_headless_csv_row():
    row = "94500,{tok},2023-04-14,c748a7a32fe49788a4b6e0c1d2e3f4a5b6c7d8e9,3.16.27"
    assert_scrubbed(row.format(tok="RRM3NQTCmyv4mwaQwSs92m5QQkYOqQAVW3ToA33w"), row.format(tok="<SECRET>"))


def test_a_random_token_in_a_positional_insert():
    sql = "INSERT INTO `api_clients` VALUES (1,'etl','{tok}','2022-08-27 10:00:00','a94a8fe5ccb19ba61c4c0873d391e987982fbbd3');"
    assert_scrubbed(sql.format(tok="QzahGImaHt8RVkGYZC7nqV2VADJHONXO"), sql.format(tok="<SECRET>"))


@pytest.mark.parametrize("row", [
    "1,9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08,3f2b1c4e-5d6a-4b7c-8d9e-0f1a2b3c4d5e,2.4.1",
    "2,getUserByIdentifierAndToken2,MAX_RETRY_COUNT_FOR_SYNC,widget",
    "(3,'open','sha512-Abc123DefGhi456JklMno789PqrStu0','2024-01-01')",
])
def test_hard_negatives_in_headless_rows_stay(row):
    """Controls: digests, UUIDs, identifiers and an SRI hash are no tokens."""
    assert_scrubbed(row, None)


# --- grouped author addresses -------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ("\\texttt{\\{emily.hoffmann, wei.whitfield\\}@inria.fr}", "\\texttt{<EMAIL>}"),
    ("% contact: {sophie,mateo.oconnor}@ethz.ch", "% contact: <EMAIL>"),
    ("Correspondence: aisha|szhang@eecs.berkeley.edu}", "Correspondence: <EMAIL>}"),
])
def test_a_grouped_author_list_goes_whole(text, expected):
    assert_scrubbed(text, expected)


def test_a_slack_mailto_link_is_no_group():
    """Control: `<mailto:a@host|a@host>` is one address twice, each replaced on its own."""
    assert_scrubbed("<mailto:ann@kanzlei-hoffmann.de|ann@kanzlei-hoffmann.de>", "<mailto:<EMAIL>|<EMAIL>>")


# --- a row of labels over the values --------------------------------------------------------------------------
def test_values_under_a_row_of_labels():
    text = ("Name              Phone               Date of birth     Passport No.\n"
            "----------------  ------------------  ----------------  ------------\n"
            "Ben Okafor        +44 7262 535190     02.01.1974        GH0641709\n\n"
            "Username      Password          Last login\n"
            "jdoe          Kx8qz2Lp9wQ2      2024-01-03\n")
    assert_scrubbed(text, "Name              Phone               Date of birth     Passport No.\n"
                          "----------------  ------------------  ----------------  ------------\n"
                          "Ben Okafor        <PHONE>     <DOB>        <PASSPORT>\n\n"
                          "Username      Password          Last login\n"
                          "jdoe          <SECRET>      2024-01-03\n")


def test_a_release_table_under_labels_stays():
    """Control: no column names a kind."""
    assert_scrubbed("Version    Date        Build\n2.4.1      2024-01-03  10442\n", None)


# --- credentials of their own shapes ----------------------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ("Gmail app password: ytyj gxad zjcs bbnj", "Gmail app password: <SECRET>"),
    ("SMTP_PASSWORD=mamrexjxrjetmous", "SMTP_PASSWORD=<SECRET>"),
    ("    erlangCookie: JFIKBP7HQOQ8NPZ51MIJVX5FV9JTWCIX", "    erlangCookie: <SECRET>"),
    ("echo 'SLWUWQNAVPYFBDAQYXPQ' > /var/lib/rabbitmq/.erlang.cookie",
     "echo '<SECRET>' > /var/lib/rabbitmq/.erlang.cookie"),
    ("RABBITMQ_ERLANG_COOKIE=V0X5ZXK2FF7A2IBY31SH9TWN", "RABBITMQ_ERLANG_COOKIE=<SECRET>"),
    ("CREATE ROLE app LOGIN PASSWORD 'md5a18823b5c05b8787654c6eb537a28e03';", "CREATE ROLE app LOGIN PASSWORD '<SECRET>';"),
    ("app     | md576acf8b2350da37fb6db14c264eebae3", "app     | <SECRET>"),
    ("PASSWORD 'SCRAM-SHA-256$4096:4CWOTDjVm9bUC0Nz81z9yDll$Ktr8bxx7WuFJKSdO5jI23BeTMhesuK9VPXDMcxyxAGi=:"
     "mtlILZREfpvFtoOz1NeWcyxEI7mmB1Giol4qxHXCra9='", "PASSWORD '<SECRET>'"),
    ("login?redirect=https%3A%2F%2Fapp.acme.io%2Fcb%3Faccess_token%3DJGjAotUKeCOBtyrBfvGGhoJsgn2rgnra%26state%3D1",
     "login?redirect=https%3A%2F%2Fapp.acme.io%2Fcb%3Faccess_token%3D<SECRET>%26state%3D1"),
])
def test_credentials_of_their_own_shape(text, expected):
    assert_scrubbed(text, expected)


@pytest.mark.parametrize("text", ["md5sum: 9e107d9d372bb6826bd81d3542a419d6  file.iso",
                                  "password: mysecretpassword", "SELECT md5(name) FROM t;"])
def test_credential_look_alikes_stay(text):
    """Controls: a file's digest, a documented example password, a call."""
    assert_scrubbed(text, None)


@pytest.mark.parametrize("text, expected", [
    ("Wire to: Routing number: 481511672  Account number: 59056057049",
     "Wire to: Routing number: 481511672  Account number: <IBAN>"),
    ("Sort code: 52-21-21, Account No: 84789421", "Sort code: 52-21-21, Account No: <IBAN>"),
])
def test_a_bank_account_number_after_its_label(text, expected):
    assert_scrubbed(text, expected)


def test_a_shop_account_number_without_bank_details_stays():
    """Control: no word of bank details near it."""
    assert_scrubbed("Your customer account number: 4412907 (see your order).", None)


@pytest.mark.parametrize("text", ["Rodné číslo: 800720/2335", "ЕГН: 5802096885", "Kennitala: 241087-3529",
                                  "CUIT: 27-32729518-2", "SA ID number: 9302165604084", "PPS number: 8063581W",
                                  "asmens kodas: 56111038407"])
def test_more_national_ids_after_their_cue(text):
    label = text.split(": ")[0]
    assert_scrubbed(text, f"{label}: <SSN>")
