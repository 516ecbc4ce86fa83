"""An AWS secret access key written right after its access key id, without its name, for `tasks.data.privacy.pii`.

Pasted credentials often come as the pair alone: `AKIA...` and on the next line (or after a blank, a comma, a
CSV field's comma) the 40-character secret key. The id has its own pass (`pii_secrets`); the secret, 40
characters of base64's alphabet, reads as nothing without the `aws_secret_access_key` name, and 40 such
characters alone are too common (hashes, paths, identifiers) to take anywhere. Right after an access key id
they are its secret: only there does this pass take them, and only a random-looking run (upper and lower case
and a digit: a hexadecimal commit hash after an id is left).

`AWS_PAIR_PASSES` has the shape of `pii_secrets.SECRET_PASSES`' entries: `(pattern, validator, group, hint)`; it
runs before the other secret passes, while the id is still in the text.
"""

from __future__ import annotations

import re

# The id (AWS's prefixes of user, temporary and other access keys), then on the same line blanks, a comma,
# semicolon, colon or `|`, or one line break (and indentation, a list's marker), optional quotes, the secret.
_PAIR = re.compile(r"(?:AKIA|ASIA|ABIA|ACCA)(?<![A-Za-z0-9]....)[0-9A-Z]{16}(?![A-Za-z0-9])[\"']?"
                   r"(?:[ \t]*[,;:|][ \t]*|[ \t]+|[ \t]*[,;]?[ \t]*\r?\n[ \t]*(?:[-*>][ \t]+)?)[\"']?"
                   r"([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])", re.ASCII)


def _random_secret(m: re.Match[str]) -> bool:
    secret = m.group(1)
    return any(c.isupper() for c in secret) and any(c.islower() for c in secret) and \
        any(c.isdigit() for c in secret) and len(set(secret)) >= 16


AWS_PAIR_PASSES = ((_PAIR, _random_secret, 1, lambda text: "IA" in text or "ACCA" in text),)
