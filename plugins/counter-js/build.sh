#!/usr/bin/env bash
# Builds the JavaScript counter into a component: plugins/counter-js/build.sh [OUT.wasm]
# (default OUT: counter-js.wasm in the current directory).
#
# - componentize-js is pinned by package.json and package-lock.json and installed from npm
#   (`npm ci`) into $TENURE_TOOLS_DIR (default /var/tmp/tenure-tools, outside the clone),
#   once per lock file.
# - The build uses componentize-js's defaults: no --disable flags.
# - componentize-js 0.23.0 is not byte-reproducible (its Wizer snapshot of the engine holds
#   build-time randomness and clock readings, see README.md), so the result is kept under
#   the sha256 of everything that goes into it; building the same source again gives the
#   same file, and so the same digest: no new version, no rollout. TENURE_PLUGIN_REBUILD=1
#   builds afresh and replaces the kept file.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
wit="$(cd "$here/../../wit" && pwd)"
out="${1:-counter-js.wasm}"
tools="${TENURE_TOOLS_DIR:-/var/tmp/tenure-tools}"

die() { printf 'counter-js/build.sh: %s\n' "$*" >&2; exit 1; }

for cmd in node npm; do
  command -v "$cmd" >/dev/null 2>&1 ||
    die "$cmd is not installed (Debian: apt-get install nodejs npm; .ci/run installs them)"
done

lock="$(sha256sum <"$here/package-lock.json" | cut -d' ' -f1)"
install="$tools/componentize-js-${lock:0:16}"
mkdir -p "$tools/builds"
exec 9>"$tools/.lock-componentize-js"
flock 9
if [ ! -f "$install/.installed" ]; then
  rm -rf "$install"
  mkdir -p "$install"
  cp "$here/package.json" "$here/package-lock.json" "$install/"
  (cd "$install" && npm ci --no-audit --no-fund --loglevel=error) ||
    die "npm ci failed for $here/package-lock.json"
  touch "$install/.installed"
fi

# Everything the component is made from: the lock file, this script, the app, the WIT.
key="$(
  {
    echo "package-lock $lock"
    cd "$here" && sha256sum build.sh app.js
    cd "$wit" && find . -type f -name '*.wit' | LC_ALL=C sort | xargs sha256sum
  } | sha256sum | cut -d' ' -f1
)"
kept="$tools/builds/counter-js-$key.wasm"

if [ ! -f "$kept" ] || [ "${TENURE_PLUGIN_REBUILD:-0}" = 1 ]; then
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  cp "$here/app.js" "$work/"
  touch -d "@${SOURCE_DATE_EPOCH:-0}" "$work/app.js"
  (cd "$work" && "$install/node_modules/.bin/componentize-js" app.js \
    --wit "$wit" -n owned-task -o "$work/out.wasm" >/dev/null) || die "componentize-js failed"
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
echo "counter-js: $how $out sha256:$(sha256sum <"$out" | cut -d' ' -f1)"
