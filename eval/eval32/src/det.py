import importlib.util, sys, torch
p = sys.argv[1]
s = importlib.util.spec_from_file_location("m", p); m = importlib.util.module_from_spec(s); sys.modules["m"] = m; s.loader.exec_module(m)
torch.manual_seed(0)
mod = m.MultiHeadSelfAttention(7, 12, 3, causal=False, dropout=0.0).eval()
for bs in (1, 2, 3):
    x = torch.randn(bs, 5, 7)
    a1, p1 = mod(x, return_attention=True); a2, p2 = mod(x, return_attention=True)
    print(bs, torch.equal(a1, a2), torch.equal(p1, p2))
