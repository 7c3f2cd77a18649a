"""The fixed 96-character vocabulary of the text models and the normalisation onto it.

Text is reduced to newline plus printable ASCII (space, 52 letters, 10 digits, 32 punctuation
marks), the paper's "English letters, digits, punctuation, spaces and new lines".
``normalize_text`` maps the rest: CR/CRLF -> newline, tabs and other spaces -> space, typographic
quotes/dashes/ellipsis -> their ASCII spelling, accented letters -> the base letter (e -> e,
ae-ligature -> ``ae``), and drops everything else (control characters, other scripts, the BOM).

Why separate: a fixed vocabulary keeps token ids stable between pre-training and fine-tuning
corpora, so the coordinator (``fleet.data``, counting a prepared text) and the device (the text
loader) must use this one table; it holds no file or tensor code.
"""

import unicodedata
from typing import Any, Dict, Optional

import numpy as np

VOCAB_CHARS = "\n" + "".join(chr(c) for c in range(32, 127))

_REPLACEMENTS = {
    "\r": "\n",
    "\t": " ",
    "\u2018": "'",
    "\u2019": "'",
    "\u201a": "'",
    "\u201b": "'",
    "\u2032": "'",
    "\u201c": '"',
    "\u201d": '"',
    "\u201e": '"',
    "\u201f": '"',
    "\u2033": '"',
    "\u00ab": '"',
    "\u00bb": '"',
    "\u2010": "-",
    "\u2011": "-",
    "\u2012": "-",
    "\u2013": "-",
    "\u2212": "-",
    "\u2014": "--",
    "\u2015": "--",
    "\u2026": "...",
    "\u00e6": "ae",
    "\u00c6": "AE",
    "\u0153": "oe",
    "\u0152": "OE",
    "\u00df": "ss",
    "\u00f8": "o",
    "\u00d8": "O",
    "\u0142": "l",
    "\u0141": "L",
}


def _translation(chars: Any) -> Dict[int, Optional[str]]:
    table = {}  # type: Dict[int, Optional[str]]
    allowed = set(VOCAB_CHARS)
    for ch in chars:
        if ch in allowed:
            continue
        if ch in _REPLACEMENTS:
            table[ord(ch)] = _REPLACEMENTS[ch]
        elif ch.isspace():
            table[ord(ch)] = " "
        else:
            base = "".join(c for c in unicodedata.normalize("NFKD", ch) if c in allowed)
            table[ord(ch)] = base if base and not base.isspace() else None
    return table


def normalize_text(text: str) -> str:
    """Map text onto the 96-character vocabulary (see the module docstring for the rules)."""
    text = text.replace("\r\n", "\n")
    return text.translate(_translation(set(text)))


class Vocab(object):
    """Characters <-> ids. ``chars[i]`` is the character with id ``i``."""

    def __init__(self, chars: str) -> None:
        self.chars = chars
        self.stoi = {c: i for i, c in enumerate(chars)}
        self.table = np.full(256, -1, dtype=np.int64)
        for i, c in enumerate(chars):
            self.table[ord(c)] = i

    def __len__(self) -> int:
        return len(self.chars)

    def __repr__(self) -> str:
        return f"Vocab({len(self.chars)} chars)"


def build_vocab(text: Optional[str] = None, fixed: bool = True) -> Vocab:
    """The vocabulary: the fixed 96 characters (default; ids independent of the text), or with
    ``fixed=False`` only those of them that occur in ``text`` after normalisation."""
    if fixed or text is None:
        return Vocab(VOCAB_CHARS)
    present = set(normalize_text(text))
    return Vocab("".join(c for c in VOCAB_CHARS if c in present))


def encode(text: str, vocab: Vocab) -> np.ndarray:
    """Normalised text as int64 ids; characters outside ``vocab`` are dropped."""
    data = normalize_text(text).encode("ascii")
    ids = vocab.table[np.frombuffer(data, dtype=np.uint8)]
    return ids[ids >= 0]


def decode(ids: Any, vocab: Vocab) -> str:
    return "".join(vocab.chars[int(i)] for i in ids)
