import re, pathlib
REF = pathlib.Path("/work/wt-diageval/solutions/transformer_lm/modeling_attention.py").read_text()
START = "# YOUR CODE STARTS HERE\n"
END = "# YOUR CODE ENDS HERE"

def fill(imports, blocks, extra=""):
    parts = REF.split(START)
    assert len(parts) == 10, len(parts)
    out = [parts[0]]
    for body, part in zip(blocks, parts[1:]):
        i = part.index(END)
        # keep the indentation of the END marker line
        j = part.rfind("\n", 0, i) + 1
        if body is None:
            out.append(START + part)
        else:
            out.append(START + body.rstrip("\n") + "\n" + part[j:])
    text = "".join(out)
    text = text.replace("import torch\nimport torch.nn as nn\n", imports + extra, 1)
    return text
