import importlib.util, sys, torch, glob
sys.path.insert(0, "/work/wt-diageval")
def load(p):
    s = importlib.util.spec_from_file_location("m" + str(abs(hash(p))), p); m = importlib.util.module_from_spec(s); sys.modules[s.name] = m; s.loader.exec_module(m); return m
ref = load("/work/wt-diageval/solutions/transformer_lm/modeling_attention.py")
x = torch.randn(2, 5, 8)
def run(m):
    out = {}
    for name, ctor, kw in [("sa", "SelfAttention", (8, 12)), ("mhsa", "MultiHeadSelfAttention", (8, 12, 3, True)),
                           ("ca", "CausalAttention", (8, 6, 7, 0.0, True)), ("wr", "MultiHeadAttentionWrapper", (8, 6, 7, 0.0, 3, True)),
                           ("mha", "MultiHeadAttention", (8, 12, 7, 0.0, 3, True))]:
        torch.manual_seed(0)
        try:
            mod = getattr(m, ctor)(*kw).eval()
            o = mod(x, return_attention=True) if name == "mhsa" else mod(x)
            out[name] = o
        except Exception as e:
            out[name] = repr(e)[:80]
    return out
R = run(ref)
for p in sorted(glob.glob("/tmp/diageval/*.py")):
    O = run(load(p)); bad = []
    for k in R:
        r, o = R[k], O[k]
        if isinstance(o, str): bad.append(f"{k}:ERR {o}"); continue
        if isinstance(r, tuple):
            ok = all(torch.allclose(a, b, atol=1e-5, equal_nan=False) if a.shape == b.shape else False for a, b in zip(r, o))
        else:
            ok = r.shape == o.shape and torch.allclose(r, o, atol=1e-5)
        if not ok: bad.append(k)
    print(p.split("/")[-1], bad)
