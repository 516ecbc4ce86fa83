"""A fourth PII probe (73 documents of genres not probed before: Kubernetes and CI files, SQL dumps, JSON APIs,
chat exports, tickets, CVs, invoices, iCalendar, diffs, forms in 12 languages) found a private key left in a diff,
escapes of the string around a value eaten with it, order and product numbers taken for phones, values one level
down or under a dump's column; with them, infrastructure code (Terraform, CloudFormation), form labels qualified
in parentheses and the compact dates forms and airlines write (`12MAR1978`)."""

from __future__ import annotations

import pytest

from tasks.data.privacy.pii import scrub_pii
from tests.helpers.pii_cases import assert_scrubbed

_KEY_BODY = ["MIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM9Oi6X5R8n1yN0uR0e9H1Wq3v", "UjlNf/8pZ9k2Lq0Xx3mR7WvN4pQ8sT1vW3yZ5aB6cD8e"]


@pytest.mark.parametrize("prefix", ["-", "+", "> ", "# ", "// ", "    "])
def test_a_private_key_in_a_diff_or_a_quote_goes_whole(prefix):
    """Every line of the block carries the prefix: the body was read only without one (the key stayed)."""
    lines = ["-----BEGIN RSA PRIVATE KEY-----", *_KEY_BODY, "-----END RSA PRIVATE KEY-----"]
    text = "diff --git a/k b/k\n" + "\n".join(prefix + line for line in lines) + "\n" + prefix + "next line\n"
    scrubbed, counts = scrub_pii(text)
    assert scrubbed == f"diff --git a/k b/k\n{prefix}<SECRET>\n{prefix}next line\n"
    assert counts == {"secret": 1}


_CREATE_AND_INSERT = """CREATE TABLE `users` (
  `id` int(11) NOT NULL AUTO_INCREMENT,
  `birth_date` date DEFAULT NULL,
  `passport_no` varchar(16),
  `api_token` varchar(64),
  `score` decimal(10,2),
  PRIMARY KEY (`id`),
  KEY `idx_birth` (`birth_date`)
) ENGINE=InnoDB;
INSERT INTO `users` VALUES (1,'1986-11-12','X1234567','tk_9f8A7b6C5d4E3f2G1h0J',12.50),(2,NULL,'L8988901',NULL,3.00);
"""


@pytest.mark.parametrize("text, expected", [
    # mysqldump: the columns are the CREATE TABLE's
    (_CREATE_AND_INSERT, _CREATE_AND_INSERT.replace("'1986-11-12','X1234567','tk_9f8A7b6C5d4E3f2G1h0J'",
                                                    "'<DOB>','<PASSPORT>','<SECRET>'").replace("'L8988901'",
                                                                                             "'<PASSPORT>'")),
    # a column list, a quoted `''`, a phone column
    ("INSERT INTO customers (id, name, dob, passport_number, password, phone) VALUES\n"
     "  (1, 'O''Brien', '1979-02-28', 'C01X00T47', 'Hunter2!xyz9', '+44 20 7946 0958');",
     "INSERT INTO customers (id, name, dob, passport_number, password, phone) VALUES\n"
     "  (1, 'O''Brien', '<DOB>', '<PASSPORT>', '<SECRET>', '<PHONE>');"),
    # pg_dump: tab-separated rows to `\.`; `\N` is NULL
    ("COPY public.patients (id, full_name, birth_date, passport_no) FROM stdin;\n"
     "1\tAnna Schmidt\t1990-07-15\tC01X00T47\n2\tJan Novak\t1984-12-01\t\\N\n\\.\n",
     "COPY public.patients (id, full_name, birth_date, passport_no) FROM stdin;\n"
     "1\tAnna Schmidt\t<DOB>\t<PASSPORT>\n2\tJan Novak\t<DOB>\t\\N\n\\.\n"),
    # columns that name no kind
    ("INSERT INTO orders (id, created_at, total) VALUES (1, '2024-01-05', 19.99), (2, NOW(), 5);", None),
])
def test_sql_dump_values_under_their_columns(text, expected):
    assert_scrubbed(text, expected)


@pytest.mark.parametrize("text, expected", [
    # the escapes of the text a value sits in (iCalendar TEXT, a JSON log) are no part of it
    ("DESCRIPTION:Join https://zoom.us/j/939?pwd=mFin5NGkQ2xZbVhTcGVG\\n\\nMeeting ID: 939",
     "DESCRIPTION:Join https://zoom.us/j/939?pwd=<SECRET>\\n\\nMeeting ID: 939"),
    ("NOTE:password: Xk29aQ7mLp\\nDoor code 1234", "NOTE:password: <SECRET>\\nDoor code 1234"),
    ('"msg": "login password=Xk29aQ7mLp\\nretry"', '"msg": "login password=<SECRET>\\nretry"'),
    # ... nor of an address (the JSON stays JSON)
    ('"\\u003cjane.doe@gmail.com\\u003e"', '"\\u003c<EMAIL>\\u003e"'),
    ('"a\\njane.doe@gmail.com"', '"a\\n<EMAIL>"'),
    # a passport one level down, Russia's series and number
    ('{"passport": {"number": "899384841", "country": "US"}}', '{"passport": {"number": "<PASSPORT>", "country": "US"}}'),
    ('<Passport issuingCountry="USA"><Number>935843975</Number></Passport>',
     '<Passport issuingCountry="USA"><Number><PASSPORT></Number></Passport>'),
    ("Паспорт: 45 06 123456", "Паспорт: <PASSPORT>"),
    ("паспорт серия 4506 № 123456", "паспорт серия <PASSPORT>"),
    ("Загранпаспорт: 72 1234567", "Загранпаспорт: <PASSPORT>"),
    ("Né(e) le 14 mai 1961 à Lyon", "Né(e) le <DOB> à Lyon"),
    # a phone layout is still a phone without a code's label
    ("Call 161-320-6005 now", "Call <PHONE> now"),
    ("Tel: 025-517-8470", "Tel: <PHONE>"),
])
def test_escapes_nesting_and_national_forms(text, expected):
    assert_scrubbed(text, expected)


@pytest.mark.parametrize("text", [
    # product, order and meeting numbers in a phone's layout after their label
    "SKU 161-320-6005  Qty 2", "NDC 08902-228-42", "Numero d'ordine: 054-3372900", "注文番号：001-5766949",
    "Meeting ID: 188 7720 8045", "Order #161-320-6005", "Art.-Nr. 030-1234567", "Part number: 212-555-4567",
    # a passport's other fields, a year after the cue
    '<Passport><Country>USA</Country></Passport>', '{"passport": {"expires": "2030-01-01"}}', "Паспорт: 2012 год",
])
def test_codes_and_fields_kept(text):
    assert_scrubbed(text, None)


@pytest.mark.parametrize("text, expected", [
    # Terraform: the name is the variable's, the value its default, a type or description may stand between
    ('variable "db_password" {\n  type = string\n  default = "Xk9#mPq2vL7wRt"\n}\n',
     'variable "db_password" {\n  type = string\n  default = "<SECRET>"\n}\n'),
    # ... any name, once the block marks it sensitive (after its default too)
    ('variable "db_conn" {\n  default = "Xk9mPq2vL7wRt44"\n  sensitive = true\n}\n',
     'variable "db_conn" {\n  default = "<SECRET>"\n  sensitive = true\n}\n'),
    # CloudFormation: the parameter's name, then its keys, `Default:` among them
    ("Parameters:\n  MasterUserPassword:\n    Type: String\n    MinLength: 8\n    Default: Adm1nPa55word\n",
     "Parameters:\n  MasterUserPassword:\n    Type: String\n    MinLength: 8\n    Default: <SECRET>\n"),
    ("Parameters:\n  DBUser:\n    NoEcho: true\n    Type: String\n    Default: 'admin_user1'\n",
     "Parameters:\n  DBUser:\n    NoEcho: true\n    Type: String\n    Default: '<SECRET>'\n"),
    # a label qualified in parentheses before its colon
    ("Password (temporary): Qw8!rT5zLm\nUser: bob\n", "Password (temporary): <SECRET>\nUser: bob\n"),
    ("**Password (admin):** hunter2Xy9\n", "**Password (admin):** <SECRET>\n"),
    ("Passport (UK): 123456789\n", "Passport (UK): <PASSPORT>\n"),
    ("Date of birth (DOB): 1978-03-12\n", "Date of birth (DOB): <DOB>\n"),
    ("Birthday (optional): 1990-05-17\n", "Birthday (optional): <DOB>\n"),
    # a form's or an airline's day, month and year run together
    ("DOB: 12MAR1978\n", "DOB: <DOB>\n"),
    ("DOB: 12MAR78, passport 123456789", "DOB: <DOB>, passport <PASSPORT>"),
])
def test_found(text, expected):
    assert_scrubbed(text, expected)


@pytest.mark.parametrize("text", [
    # defaults that are no credential: other names, unmarked; placeholders; no default at all
    'variable "region" {\n  default = "us-east-1"\n}\nvariable "instance_type" {\n  default = "t3.micro"\n}\n',
    'variable "db_password" {\n  type = string\n  sensitive = true\n}\n',
    'variable "db_password" {\n  default = "changeme"\n}\n',
    "Parameters:\n  KeyName:\n    Type: AWS::EC2::KeyPair::KeyName\n    Default: my-keypair-2024\n",
    # `Parameters:` opens a mapping: its first parameter's default is no default of `Parameters`
    "Parameters:\n  InstanceType:\n    Type: String\n    Default: t3.micro\n",
    # code: a space before the parenthesis is no label's qualifier when no value of a form follows
    "class Password (models.Model):\n    value = models.CharField(max_length=128)\n",
    "def reset_password (self):\n    return self.token\n",
    "Password (min. 8 characters): \n",
    "The password (see above): is not shared\n",
    "Passport (see section 3): photo page\n",
    "DOB (if known): unknown\n",
    # no cue, or no calendar date
    "flight 12MAR1978 departs\n",
    "date of birth: 31FEB1980\n",
])
def test_kept(text):
    assert_scrubbed(text, None)
