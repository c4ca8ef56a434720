#!/usr/bin/env bash
# Builds the Python counter into a component: plugins/counter-py/build.sh [OUT.wasm]
# (default OUT: counter-py.wasm in the current directory). Other Python plugins of this
# repository build with it too: build.sh OUT.wasm APP_DIR builds APP_DIR/app.py with the
# SDK (sdk/python/tenure.py) on its path (plugins/sdk-py/build.sh does), so every Python
# plugin shares the one pinned componentize-py install.
#
# - componentize-py is pinned (COMPONENTIZE_PY below) and installed from PyPI into a venv
#   under $TENURE_TOOLS_DIR (default /var/tmp/tenure-tools, outside the clone), once.
# - The sources are copied to a fresh directory with fixed file times, so the build never
#   writes into this folder (componentize-py writes __pycache__ next to the app).
# - componentize-py 0.25.1 is not byte-reproducible (its pre-initialised snapshot holds
#   build-time randomness and clock readings, see README.md), so the result is kept under
#   the sha256 of everything that goes into it; building the same source again gives the
#   same file, and so the same digest: no new version, no rollout. TENURE_PLUGIN_REBUILD=1
#   builds afresh and replaces the kept file.
set -euo pipefail

COMPONENTIZE_PY=0.25.1

here="$(cd "$(dirname "$0")" && pwd)"
wit="$(cd "$here/../../wit" && pwd)"
out="${1:-counter-py.wasm}"
app="$(cd "${2:-$here}" && pwd)"
name="$(basename "$app")"
sdk="$(cd "$here/../../sdk/python" && pwd)"
tools="${TENURE_TOOLS_DIR:-/var/tmp/tenure-tools}"
venv="$tools/componentize-py-$COMPONENTIZE_PY"

die() { printf '%s/build.sh: %s\n' "$name" "$*" >&2; exit 1; }

command -v python3 >/dev/null 2>&1 ||
  die "python3 is not installed (Debian: apt-get install python3 python3-venv; .ci/run installs them)"

mkdir -p "$tools/builds"
exec 9>"$tools/.lock-componentize-py"
flock 9
if [ ! -f "$venv/.installed" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv" ||
    die "python3 -m venv failed (Debian: apt-get install python3-venv)"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-input \
    "componentize-py==$COMPONENTIZE_PY" || die "pip could not install componentize-py==$COMPONENTIZE_PY"
  touch "$venv/.installed"
fi

# Everything the component is made from: the tool's version, this script, the app, the WIT.
key="$(
  {
    echo "componentize-py $COMPONENTIZE_PY"
    cd "$here" && sha256sum build.sh
    cd "$app" && sha256sum app.py
    cd "$sdk" && sha256sum tenure.py
    cd "$wit" && find . -type f -name '*.wit' | LC_ALL=C sort | xargs sha256sum
  } | sha256sum | cut -d' ' -f1
)"
kept="$tools/builds/$name-$key.wasm"

if [ ! -f "$kept" ] || [ "${TENURE_PLUGIN_REBUILD:-0}" = 1 ]; then
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  mkdir "$work/src"
  cp "$app/app.py" "$sdk/tenure.py" "$work/src/"
  touch -d "@${SOURCE_DATE_EPOCH:-0}" "$work/src/app.py" "$work/src/tenure.py" "$work/src"
  (cd "$work" && "$venv/bin/componentize-py" --quiet -d "$wit" -w owned-task \
    componentize -p src app -o "$work/out.wasm") || die "componentize-py failed"
  mv "$work/out.wasm" "$kept.tmp$$"
  mv "$kept.tmp$$" "$kept"
  how=built
else
  how=reused
fi
flock -u 9

mkdir -p "$(dirname "$out")"
cp "$kept" "$out.tmp$$"
mv "$out.tmp$$" "$out"
echo "$name: $how $out sha256:$(sha256sum <"$out" | cut -d' ' -f1)"
