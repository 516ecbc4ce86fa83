"""Markup that may stand between a label and its value, as regex fragments shared by the cued passes.

A form rendered to Markdown or HTML keeps its label and value apart with markup, not only with a `:`: the label in
bold (`**Password:** …`, `- **DOB**: …`, `__Born__: …`), a Markdown table's cell boundary (`| DOB | 1985-03-14 |`)
or an HTML table's (`<td>SSN</td><td>…</td>`, `<dt>…</dt><dd>…</dd>`). The credential names (`pii_keyed`), the
date-of-birth cues (`pii_personal`) and the SSN cue (`pii_ids`) read through the same fragments, so what one
accepts the others do.
"""

from __future__ import annotations

# Markdown emphasis around a label: bold or italics, with asterisks or underscores.
EMPHASIS = r"(?:\*\*?|__?)"
# An inline element wrapping a cell's text (`<td><b>Born</b></td>`), opened and closed.
INLINE = r"(?:<(?:b|strong|span|label|em|i)\b[^<>]{0,100}>)?"
INLINE_END = r"(?:</(?:b|strong|span|label|em|i)>)?"
# From the end of a label's cell to the start of its value's: a Markdown table's `|`, or an HTML label cell's
# close and the value cell's open (a `th` or `td` then a `td`; a `dt` then a `dd`), across a line break or
# indentation between them. (A `|` with spaces only: `a||b` is code's or.)
CELL_BREAK = (r"(?:[ \t]*\|(?!\|)[ \t]*"
              r"|(?i:[ \t]*" + INLINE_END + r"[ \t]*</(?:t[dh]|dt)>\s{0,40}<(?:td|dd)\b[^<>]{0,200}>[ \t]*"
              + INLINE + r")[ \t]*)")
