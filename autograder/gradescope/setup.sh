#!/usr/bin/env bash
# Gradescope image build: runs once, as root, from /autograder/source (the
# unzipped autograder.zip). Installs only what grading needs, creates the
# unprivileged user that runs student code, and locks the source folder
# (hidden values, rubric) away from that user.
#
# torch comes from the PyTorch CPU index: PyPI's Linux wheel is the
# multi-GB CUDA build, useless here. Pick the Ubuntu 22.04 or 24.04 base
# image on Gradescope; the grader needs Python >= 3.11 (installed if absent).
#
# AUTOGRADER_SETUP_SKIP_INSTALL=1 skips the package installs (kit tests).
set -euo pipefail

SOURCE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV=/opt/attention-grader/venv     # run_autograder's default interpreter
WORKER_USER=autograder-worker       # autograder/sandbox.py's default
TORCH_INDEX=https://download.pytorch.org/whl/cpu

if [ "${AUTOGRADER_SETUP_SKIP_INSTALL:-0}" != 1 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y --no-install-recommends python3 python3-venv python3-pip
    PYTHON=python3
    if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
        apt-get install -y --no-install-recommends python3.11 python3.11-venv
        PYTHON=python3.11
    fi
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --no-cache-dir --upgrade pip
    "$VENV/bin/python" -m pip install --no-cache-dir \
        --index-url "$TORCH_INDEX" torch==2.13.0
    "$VENV/bin/python" -m pip install --no-cache-dir \
        -r "$SOURCE/requirements.txt"
    chmod -R a+rX "$(dirname "$VENV")"   # the worker user imports torch
fi

if ! id -u "$WORKER_USER" >/dev/null 2>&1; then
    useradd --system --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin "$WORKER_USER"
fi

# The grader (root) reads everything here; the worker user reads nothing.
chown -R root:root "$SOURCE"
chmod -R go-rwx "$SOURCE"
chmod 700 "$SOURCE"
echo "setup.sh: grader ready in $SOURCE (worker user $WORKER_USER)"
