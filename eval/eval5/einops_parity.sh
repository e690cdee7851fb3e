#!/usr/bin/env bash
# The einops parity check of issue 32's Done-when: one submission that
# imports einops (sub06 correct, sub17 one bug) scored by the student
# release's `make check`, accepted by its `make submission`, graded by the
# grader and by the Gradescope zip's run_autograder with the venv setup.sh
# built (kit_tests/test_gradescope_image.py's cache); a scipy import as the
# control `check` and `make submission` must refuse.
#   bash eval/eval5/einops_parity.sh [CHECKOUT]   (needs dist/ built there:
#   make release autograder PY=/work/main/.venv/bin/python)
set -euo pipefail
CO=$(cd "${1:-$(dirname "$0")/..}" && pwd)
PY=/work/main/.venv/bin/python
IMG=$(ls -d /var/tmp/attention-kit-gradescope-image/venv-* | head -1)/bin/python
T=$(mktemp -d /tmp/eval5-parity-XXXX)
cp -r "$CO/dist/student" "$T/stu"
mkdir -p "$T/gs/source" "$T/gs/submission" "$T/gs/results"
(cd "$T/gs/source" && unzip -q "$CO/dist/autograder.zip")
cp "$T/gs/source/run_autograder" "$T/gs/"
for s in sub06 sub17; do
  cp "$CO/eval/eval5/submissions/$s.py" "$T/stu/transformer_lm/modeling_attention.py"
  chk=$(cd "$T/stu" && make check PY=$PY 2>&1 | grep '^public:')
  (cd "$T/stu" && make submission PY=$PY >/dev/null 2>&1) && sub=built || sub=REFUSED
  PYTHONPATH=$CO $PY -m autograder grade --out "$T/g-$s" --jobs 1 \
      "$CO/eval/eval5/submissions/$s.py" >/dev/null 2>&1
  grd=$(python3 -c "import json;print(json.load(open('$T/g-$s/submissions/$s/results.json'))['score'])")
  rm -f "$T/gs/submission/"* "$T/gs/results/"*
  cp "$T/stu/submission.zip" "$T/gs/submission/"
  (cd "$T/gs" && AUTOGRADER_ROOT="$T/gs" AUTOGRADER_PYTHON="$IMG" \
      PYTHONDONTWRITEBYTECODE=1 bash "$T/gs/run_autograder" >/dev/null 2>&1)
  gs=$(python3 -c "import json;print(json.load(open('$T/gs/results/results.json'))['score'])")
  echo "$s: make check '$chk' | make submission $sub | grader $grd | gradescope $gs"
done
sed 's/^from einops import rearrange/&\nimport scipy  # noqa/' \
    "$CO/eval/eval5/submissions/sub06.py" > "$T/stu/transformer_lm/modeling_attention.py"
out=$(cd "$T/stu" && make check PY=$PY 2>&1 || true)
grep -o 'NOT checked: your module imports `scipy`' <<<"$out" || echo "check: scipy NOT refused"
out=$(cd "$T/stu" && make submission PY=$PY 2>&1 || true)
grep -o 'NOT built: your module imports `scipy`' <<<"$out" || echo "submission: scipy NOT refused"
rm -rf "$T"
