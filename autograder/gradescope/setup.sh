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
# Gradescope; the grader needs Python >= 3.11 (installed from apt: on any
# other base image setup.sh stops before apt and says which ones work).
#
# AUTOGRADER_SETUP_SKIP_INSTALL=1  skip the package installs (kit tests)
# AUTOGRADER_SETUP_PYTHON=PATH     build the venv with this Python, no apt
# AUTOGRADER_SETUP_OS_RELEASE=FILE the os-release read (kit tests)
# AUTOGRADER_VENV=DIR              the venv (default: homework.toml's [gradescope] venv)
# TORCH_INDEX=URL                  the CPU index (empty: default index only)
set -euo pipefail

SOURCE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# The profile's [gradescope] venv (its only `venv` key): run_autograder's too.
PROFILE_VENV="$(sed -n 's/^venv *= *"\([^"]*\)".*/\1/p' \
    "$SOURCE/homework.toml" 2>/dev/null | head -n 1 || true)"
VENV="${AUTOGRADER_VENV:-$PROFILE_VENV}"
if [ -z "$VENV" ]; then
    echo "setup.sh: no homework.toml with a [gradescope] venv beside this" \
        "script: rebuild the zip with \`make autograder\`" >&2
    exit 1
fi
WORKER_USER=autograder-worker       # autograder/sandbox/pool.py's default
export TORCH_INDEX="${TORCH_INDEX-https://download.pytorch.org/whl/cpu}"

BASES="Gradescope's Ubuntu 22.04 or 24.04 base image (or Debian >= 12)"
refuse() {   # the base image cannot give the grader its Python: say so first
    echo "setup.sh: $1" >&2
    echo "setup.sh: choose $BASES, or set AUTOGRADER_SETUP_PYTHON to a" \
         "Python >= 3.11 with venv already in the image." >&2
    exit 1
}

# The apt packages that give this base image a Python >= 3.11 with venv,
# read from os-release before any apt call (Debian 11, Ubuntu 20.04: none).
base_image_packages() {
    local ID="" VERSION_ID="" PRETTY_NAME=""
    # shellcheck disable=SC1090  # KEY=value lines
    . "${AUTOGRADER_SETUP_OS_RELEASE:-/etc/os-release}" 2>/dev/null || true
    case "$ID:$VERSION_ID" in
        ubuntu:22.04) echo "python3.11 python3.11-venv" ;;
        ubuntu:2[4-9].*|ubuntu:[3-9]*|debian:1[2-9]*|debian:[2-9][0-9]*)
            echo "python3 python3-venv" ;;
        *) refuse "this base image (${PRETTY_NAME:-unknown: no os-release})"\
" has no Python >= 3.11 package; the grader needs one (tomllib)." ;;
    esac
}

if [ "${AUTOGRADER_SETUP_SKIP_INSTALL:-0}" != 1 ]; then
    PYTHON="${AUTOGRADER_SETUP_PYTHON:-}"
    if [ -n "$PYTHON" ]; then
        "$PYTHON" -c 'import sys, venv; sys.exit(sys.version_info < (3, 11))'\
            2>/dev/null || refuse "AUTOGRADER_SETUP_PYTHON=$PYTHON is not a\
 Python >= 3.11 with venv."
    else
        PACKAGES="$(base_image_packages)" || exit 1
        export DEBIAN_FRONTEND=noninteractive
        apt-get update
        # shellcheck disable=SC2086  # one word per package
        apt-get install -y --no-install-recommends $PACKAGES
        PYTHON="${PACKAGES%% *}"
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
