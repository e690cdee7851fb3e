import importlib, pathlib
OUT = pathlib.Path("/tmp/diageval")
bases = {s: importlib.import_module(f"base_{s}").TEXT for s in "abcde"}
names = {"a": "einsum", "b": "loops", "c": "helpers", "d": "bmm", "e": "sdpa"}

def edit(text, pairs):
    for old, new in pairs:
        assert text.count(old) == 1, (old, text.count(old))
        text = text.replace(old, new)
    return text

correct = {"a": "c01_einsum_einops_correct", "b": "c02_loops_correct",
           "c": "c03_helpers_correct", "d": "c04_bmm_correct",
           "e": "c05_sdpa_correct"}
for s, n in correct.items():
    (OUT / f"{n}.py").write_text(bases[s])

from bugs import BUGS
for name, s, pairs in BUGS:
    (OUT / f"{name}.py").write_text(edit(bases[s], pairs))
print("written", len(correct) + len(BUGS))
