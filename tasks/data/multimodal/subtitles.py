"""SRT and WebVTT cues → segments. A malformed timestamp is a ValueError naming the line; cue timing itself
(order, overlap, range) is left to the `segments` check, so a shifted subtitle file reaches it intact."""

from __future__ import annotations

import re

from tasks.data.multimodal.records import Segment

# 00:01:02,500 (SRT) or 00:01:02.500 / 01:02.500 (VTT); hours optional in VTT
_TIME = r"(?:(\d+):)?(\d{1,2}):(\d{2})[,.](\d{1,3})"
_CUE = re.compile(rf"^\s*{_TIME}\s*-->\s*{_TIME}")
_TAG = re.compile(r"<[^>]+>")


def _seconds(h: str | None, m: str, s: str, frac: str) -> float:
    return int(h or 0) * 3600 + int(m) * 60 + int(s) + int(frac.ljust(3, "0")) / 1000


def parse_cues(text: str, where: str = "subtitles") -> list[Segment]:
    """Cues of an SRT or WebVTT text, in file order: the timing line, then text lines up to a blank line.
    Cue numbers (SRT), the WEBVTT header, NOTE/STYLE blocks and cue settings are skipped; inline tags removed."""
    segments: list[Segment] = []
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if "-->" not in line:
            i += 1
            continue
        m = _CUE.match(line)
        if m is None:
            raise ValueError(f"{where} line {i + 1}: unreadable cue timing {line.strip()[:80]!r}")
        g = m.groups()
        start, end = _seconds(*g[:4]), _seconds(*g[4:])
        body: list[str] = []
        i += 1
        while i < len(lines) and lines[i].strip():
            body.append(_TAG.sub("", lines[i]).strip())
            i += 1
        segments.append(Segment(start, end, " ".join(b for b in body if b)))
    return segments


def format_srt(segments: list[Segment]) -> str:
    """Segments as an SRT file (the embedded source writes its transcripts this way)."""
    def stamp(t: float) -> str:
        ms = int(round(t * 1000))
        return f"{ms // 3_600_000:02d}:{ms // 60_000 % 60:02d}:{ms // 1000 % 60:02d},{ms % 1000:03d}"
    return "".join(f"{n}\n{stamp(s.start)} --> {stamp(s.end)}\n{s.text}\n\n" for n, s in enumerate(segments, 1))


def format_vtt(segments: list[Segment]) -> str:
    """Segments as a WebVTT file."""
    def stamp(t: float) -> str:
        ms = int(round(t * 1000))
        return f"{ms // 3_600_000:02d}:{ms // 60_000 % 60:02d}:{ms // 1000 % 60:02d}.{ms % 1000:03d}"
    return "WEBVTT\n\n" + "".join(f"{stamp(s.start)} --> {stamp(s.end)}\n{s.text}\n\n" for s in segments)
