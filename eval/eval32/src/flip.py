import importlib.util, sys, torch
p = sys.argv[1]
s = importlib.util.spec_from_file_location("m", p); m = importlib.util.module_from_spec(s); sys.modules["m"] = m; s.loader.exec_module(m)
torch.manual_seed(0)
mod = m.MultiHeadSelfAttention(7, 12, 3).eval()
x = torch.randn(3, 5, 7)
a1, _ = mod(x, return_attention=True); a2, _ = mod(x.flip(0), return_attention=True)
print("same input twice equal:", torch.equal(a1, mod(x, return_attention=True)[0]), "| flipped-batch call, flipped back, equal:", torch.allclose(a1, a2.flip(0)))
