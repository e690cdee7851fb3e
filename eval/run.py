"""Grade a corpus (eval/eval5, eval/eval32: CORPUS/submissions/*.py)
with a checkout's grader, as a course would, and score the grader against
CORPUS/key.toml and CORPUS/judgements.toml.

    python3 eval/run.py [CHECKOUT] [--corpus DIR] [--out DIR] [--jobs N]
                        [--reuse] [--stubs FILE]

CORPUS defaults to eval/eval5. CHECKOUT (default: the checkout this file is in) is the grader under
test: it runs `PYTHONPATH=CHECKOUT /work/main/.venv/bin/python -m
autograder grade --out DIR --jobs N eval5/submissions/*.py` (README,
docs/grading.md: "Grading a folder of submissions"; the same command
`make grade SUBMISSIONS=...` runs), then reads every results.json.

Per submission it prints the score, the items lost (against the key) and
every line of the feedback of the items lost. Then the tallies:
- honest styles losing points: a correct submission losing anything;
- cascades: items lost beyond the key's (a lost bonus whose `requires`
  names a key item is expected, not a cascade); missed: key items kept;
- causes named / part / not named, per bug: judgements.toml [cause]
  when it holds a verdict for the same feedback, else a first guess from
  the key's `terms` (marked `guess`);
- false claims: every feedback line is judged by hand against the code,
  once, in judgements.toml [line.<hash>] (hash of the submission and the
  line's text), so a rerun on a newer checkout lists only its new lines as
  `UNJUDGED`; --stubs FILE writes TOML stubs for them to fill in.
"""
import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
PYTHON = "/work/main/.venv/bin/python"
# Lines that only measure (expected vs got, counts, a pass mark, the
# deduction's points) make no claim about the code: `measure`, never
# judged by hand. A line with anything appended (a cause, a question, a
# hint) does not match and is judged.
MEASURE = [re.compile(p) for p in (
    r"^- ✘ public case `[^`]+` \(.*\): (`\w+` from forward\(x[^)]*\)|"
    r"`\w+`|the output of forward\(x\)) (differs at \d+ of \d+ positions; "
    r"largest difference \S+ at index \[[\d, ]+\]: expected \S+, got \S+ "
    r"\(tolerance [^)]*\)|contains NaN values at \d+ of \d+ positions "
    r"\(first at index \[[\d, ]+\]; expected \S+\))$",
    r"^- ✘ hidden cases: \d+ of \d+ passed \(which ones and why is shown "
    r"once grades are published\)$",
    r"^- ✔ ", r"^\*\*-\d+(\.\d+)? points?\*\*$")]


def line_hash(sub, line):
    norm = " ".join(line.split())
    return hashlib.sha1(f"{sub}\0{norm}".encode()).hexdigest()[:12]


def text_hash(text):
    return hashlib.sha1(" ".join(text.split()).encode()).hexdigest()[:12]


def grade(checkout, corpus, out, jobs):
    subs = sorted(str(p) for p in (corpus / "submissions").glob("*.py"))
    env = dict(os.environ, PYTHONPATH=str(checkout))
    cmd = [PYTHON, "-m", "autograder", "grade", "--out", str(out),
           "--jobs", str(jobs), *subs]
    print("$ PYTHONPATH=%s %s" % (checkout, " ".join(
        cmd[:8] + [f"{corpus.name}/submissions/*.py"])), flush=True)
    proc = subprocess.run(["nice", "-n", "10", *cmd], cwd=checkout, env=env,
                          capture_output=True, text=True)
    if proc.returncode not in (0,):
        print(proc.stdout[-3000:], proc.stderr[-3000:], sep="\n")
        sys.exit(f"grading failed with status {proc.returncode}")


def toml_str(s):
    return json.dumps(s, ensure_ascii=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("checkout", nargs="?", default=str(HERE.parent))  # the checkout
    ap.add_argument("--corpus", default=str(HERE / "eval5"))
    ap.add_argument("--out", default=None)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--reuse", action="store_true",
                    help="read OUT as it is, grade nothing")
    ap.add_argument("--stubs", default=None,
                    help="write TOML stubs of unjudged lines/causes here")
    args = ap.parse_args()
    checkout = Path(args.checkout).resolve()
    corpus = Path(args.corpus).resolve()
    out = Path(args.out or f"/tmp/{corpus.name}-grades-{checkout.name}"
               ).resolve()
    if not args.reuse:
        grade(checkout, corpus, out, args.jobs)

    key = tomllib.loads((corpus / "key.toml").read_text())
    judged = tomllib.loads((corpus / "judgements.toml").read_text()) \
        if (corpus / "judgements.toml").exists() else {}
    lines_j = judged.get("line", {})
    cause_j = judged.get("cause", {})
    rubric = tomllib.loads((checkout / "autograder" / "rubric.toml")
                           .read_text())
    requires = {b["id"]: b.get("requires", []) for t in rubric["task"]
                for b in t.get("bonus", [])}

    tally = dict(honest_loss=[], cascades=[], missed=[], named=0, part=0,
                 not_named=0, false=[], misplaced=[], unjudged=0, lines=0)
    stubs, stubbed = [], set()
    for sub in sorted(key):
        entry = key[sub]
        res = json.loads((out / "submissions" / sub / "results.json")
                         .read_text())
        bugs = entry.get("bugs", [])
        base = key.get(entry.get("base", sub), entry)
        expect_bonus = base.get("bonus", False)
        key_items = {i for b in bugs for i in b["items"]}
        lost, outputs = [], {}
        for t in res.get("tests", []):
            num = t.get("number", "?")
            score, mx = t.get("score", 0), t.get("max_score", 0)
            is_bonus = num in requires
            if is_bonus:
                gone = expect_bonus and score <= 0
            else:
                gone = score < mx or score < 0
            outputs[num] = t.get("output", "")
            if gone:
                lost.append(num)
        print(f"\n=== {sub} ({'correct' if not bugs else f'{len(bugs)} bug(s)'}"
              f"): {res.get('score')} / 16   lost: {', '.join(lost) or '-'}")
        for b in bugs:
            print(f"    key: {b['what']}  -> {', '.join(b['items'])}")
        for num in lost:
            for raw in outputs[num].splitlines():
                line = raw.strip()
                if not line:
                    continue
                tally["lines"] += 1
                h = line_hash(sub, line)
                j = lines_j.get(h)
                if j is None and any(p.match(line) for p in MEASURE):
                    j = {"verdict": "measure"}
                mark = j["verdict"] if j else "UNJUDGED"
                if j is None:
                    tally["unjudged"] += 1
                    if h not in stubbed:
                        stubbed.add(h)
                        stubs.append(
                            f"[line.{h}]\nsub = {toml_str(sub)}\n"
                            f"item = {toml_str(num)}\n"
                            f"text = {toml_str(line)}\n"
                            f"verdict = \"\"   # true | false | misplaced"
                            f" | vague\nwhy = \"\"\n")
                elif j["verdict"] == "false":
                    tally["false"].append((sub, num, line, j.get("why", ""),
                                           j.get("source", "")))
                elif j["verdict"] == "misplaced":
                    tally["misplaced"].append((sub, num, line,
                                               j.get("why", ""),
                                               j.get("source", "")))
                print(f"  [{num}] ({mark}) {line}")
        # honest losses and cascades
        extra = []
        for num in lost:
            if num in key_items:
                continue
            if num in requires and set(requires[num]) & key_items:
                continue
            extra.append(num)
        if not bugs and lost:
            tally["honest_loss"].append((sub, lost))
        elif extra:
            tally["cascades"].append((sub, extra))
        missed = sorted(key_items - set(lost))
        if missed:
            tally["missed"].append((sub, missed))
        # causes
        for n, b in enumerate(bugs):
            text = "\n".join(outputs.get(i, "") for i in b["items"]
                             if i in lost)
            fh = text_hash(text)
            cj = cause_j.get(sub, {}).get(str(n))
            if cj and cj.get("feedback") == fh:
                verdict, how = cj["verdict"], "judged"
            else:
                low = text.lower()
                hits = [any(t.lower() in low for t in grp)
                        for grp in b["terms"]]
                verdict = ("named" if all(hits) else
                           "part" if hits[0] else "not")
                how = "guess"
                stubs.append(
                    f"[cause.{sub}.{n}]\nfeedback = {toml_str(fh)}\n"
                    f"verdict = {toml_str(verdict)}   # named | part | not"
                    f" (guess)\nwhy = \"\"\n")
            if not text:
                verdict = "not"
            key_name = {"named": "named", "part": "part", "not": "not_named"}
            tally[key_name[verdict]] += 1
            print(f"  cause of bug {n + 1}: {verdict} ({how}); key: "
                  f"{b['cause']}")

    nbugs = tally["named"] + tally["part"] + tally["not_named"]
    print("\n==================== tally ====================")
    print(f"submissions: {len(key)}, bugs: {nbugs}, feedback lines judged: "
          f"{tally['lines'] - tally['unjudged']} of {tally['lines']}")
    print(f"honest styles losing points: {len(tally['honest_loss'])}")
    for sub, items in tally["honest_loss"]:
        print(f"  {sub}: {', '.join(items)}")
    print(f"cascades (items lost beyond the key's): {len(tally['cascades'])}")
    for sub, items in tally["cascades"]:
        print(f"  {sub}: {', '.join(items)}")
    print(f"missed (key items kept): {len(tally['missed'])}")
    for sub, items in tally["missed"]:
        print(f"  {sub}: {', '.join(items)}")
    print(f"causes: named {tally['named']}, part {tally['part']}, "
          f"not named {tally['not_named']} (of {nbugs})")
    print(f"false claims: {len(tally['false'])}")
    for sub, num, line, why, src in tally["false"]:
        print(f"  {sub} [{num}] {line}\n      why false: {why}\n"
              f"      likely from: {src}")
    print(f"misplaced (true, but points away from the wrong line): "
          f"{len(tally['misplaced'])}")
    for sub, num, line, why, src in tally["misplaced"]:
        print(f"  {sub} [{num}] {line}\n      why: {why}\n"
              f"      likely from: {src}")
    print(f"unjudged lines: {tally['unjudged']}")
    if args.stubs:
        Path(args.stubs).write_text("\n".join(stubs))
        print(f"stubs: {args.stubs}")


if __name__ == "__main__":
    main()
