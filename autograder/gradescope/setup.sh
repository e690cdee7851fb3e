#!/usr/bin/env bash
# Gradescope image build: runs once, as root, from /autograder/source (the
# unzipped autograder.zip). Installs only what grading needs, creates the
# unprivileged user that runs student code, and locks the source folder
# (hidden values, rubric) away from that user.
#
# The venv holds requirements.txt and nothing else, installed by
# install_deps.py (the kit's one install rule): torch alone from the PyTorch
# CPU index (PyPI's Linux wheel is the multi-GB CUDA build), falling back
# fast to the default index if that one cannot serve it; everything else
# from the default index. Pick the Ubuntu 22.04 or 24.04 base image on
# Gradescope; the grader needs Python >= 3.11 (installed if absent).
#
# AUTOGRADER_SETUP_SKIP_INSTALL=1  skip the package installs (kit tests)
# AUTOGRADER_SETUP_PYTHON=PATH     build the venv with this Python, no apt
# AUTOGRADER_VENV=DIR              the venv (default /opt/attention-grader/venv)
# TORCH_INDEX=URL                  the CPU index (empty: default index only)
set -euo pipefail

SOURCE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${AUTOGRADER_VENV:-/opt/attention-grader/venv}"  # run_autograder's default
WORKER_USER=autograder-worker       # autograder/sandbox.py's default
export TORCH_INDEX="${TORCH_INDEX-https://download.pytorch.org/whl/cpu}"

if [ "${AUTOGRADER_SETUP_SKIP_INSTALL:-0}" != 1 ]; then
    PYTHON="${AUTOGRADER_SETUP_PYTHON:-}"
    if [ -z "$PYTHON" ]; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update
        apt-get install -y --no-install-recommends python3 python3-venv
        PYTHON=python3
        if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'
        then
            apt-get install -y --no-install-recommends python3.11 \
                python3.11-venv
            PYTHON=python3.11
        fi
    fi
    PIP_NO_CACHE_DIR=1 "$PYTHON" "$SOURCE/install_deps.py" --venv "$VENV" \
        -r "$SOURCE/requirements.txt"
    chmod -R a+rX "$VENV"   # the worker user imports torch from here
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
