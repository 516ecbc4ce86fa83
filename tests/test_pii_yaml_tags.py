"""YAML tags after a password key: CloudFormation's intrinsic functions and config loaders' env tags name a value
held elsewhere (`!Ref DbPassword`, `!ImportValue SharedDbPassword2`, `!ENV DB_PASS`), so what follows is a name,
not the secret, and stays; a tag that types a literal (`!!str s3cr3tP4ss`) still has its value scrubbed, and so
does a generated password that merely starts with `!` (`!PBpfot2A89Q2`, `pii_credentials`)."""

from __future__ import annotations

import pytest

from tasks.data.privacy.pii import scrub_pii

KEPT = [
    "MasterUserPassword: !ImportValue SharedDbPassword2",      # was `!ImportValue <SECRET>`
    "MasterUserPassword: !Ref DBPassword2Param",
    "DBPassword: !GetAtt DbSecret2.SecretString",
    "password: !FindInMap [Env, Prod, DbPass2X]",
    "db_password: !Sub '{{resolve:secretsmanager:Prod2Db}}'",
    "api_key: !ENV ApiKey2Prod",
    "password: !env_var DbPass2Prod",
]
SCRUBBED = [
    ("password: !!str s3cr3tP4ss9", "password: !!str <SECRET>"),
    ("DOCKER_PASSWORD: !PBpfot2A89Q2", "DOCKER_PASSWORD: <SECRET>"),
    ("MasterUserPassword: Xk9vQ2mLp7Rt", "MasterUserPassword: <SECRET>"),
]


@pytest.mark.parametrize("text", KEPT)
def test_a_reference_tag_names_a_value_held_elsewhere(text):
    assert scrub_pii(text) == (text, {})


@pytest.mark.parametrize("text, want", SCRUBBED)
def test_a_literal_after_a_type_tag_or_a_bang_password_is_scrubbed(text, want):
    assert scrub_pii(text)[0] == want
