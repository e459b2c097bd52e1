import os; os.environ["HF_HUB_OFFLINE"]="1"
from binfmt import parse
from tokenizers import Tokenizer
buf,hdr,pieces,scores,norm,t=parse()
tk = Tokenizer.from_file("model/tokenizer.json")
nz = tk.normalizer
bad=[]
for cp,v in norm.items():
    s = "a"+chr(cp)+"b"
    got = nz.normalize_str(s)
    exp = ("a"+v+"b")
    import re; exp = re.sub(" {2,}"," ",exp)
    if got!=exp: bad.append((hex(cp),got,exp))
print("map entries mismatching:", len(bad), bad[:10])
# unmapped chars pass through
import random
random.seed(0)
s="".join(chr(random.randint(0x20,0x2FFFF)) for _ in range(3000))
s="".join(c for c in s if not (0xD800<=ord(c)<0xE000))
exp="".join(norm.get(ord(c),c) for c in s); exp=re.sub(" {2,}"," ",exp)
got=nz.normalize_str(s)
print("random string equal:", got==exp, len(s))
if got!=exp:
    import difflib
    for i,(a,b) in enumerate(zip(got,exp)):
        if a!=b: print(i, repr(got[i-3:i+5]), repr(exp[i-3:i+5])); break
