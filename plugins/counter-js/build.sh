#!/usr/bin/env bash
# Builds the JavaScript counter into a component: plugins/counter-js/build.sh [OUT.wasm]
# (default OUT: counter-js.wasm in the current directory). Other JavaScript plugins of
# this repository build with it too: build.sh OUT.wasm APP_DIR builds APP_DIR/app.js
# (plugins/sdk-js/build.sh does), with the SDK (sdk/js/tenure.js) beside it, so every
# JavaScript plugin shares the one pinned componentize-js install.
#
# - componentize-js is pinned by package.json and package-lock.json and installed from npm
#   (`npm ci`) into $TENURE_TOOLS_DIR (default /var/tmp/tenure-tools, outside the clone),
#   once per lock file.
# - The build uses componentize-js's defaults: no --disable flags.
# - The build is reproducible: the same source gives the same bytes, on any machine with
#   the same tool versions (README.md says what componentize-js 0.23.0 records and how
#   each is fixed): node runs with a fixed V8 random seed, in a fixed working directory
#   (/tmp/tenure-build-counter-js, one build at a time), and Wizer runs with
#   fixed-entropy.so preloaded (fixed random bytes and clock; built here with cc).
# - The result is also kept under the sha256 of everything that goes into it, so an
#   unchanged plugin is not rebuilt (a build takes tens of seconds).
#   TENURE_PLUGIN_REBUILD=1 builds afresh and replaces the kept file.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
wit="$(cd "$here/../../wit" && pwd)"
out="${1:-counter-js.wasm}"
app="$(cd "${2:-$here}" && pwd)"
name="$(basename "$app")"
sdk="$(cd "$here/../../sdk/js" && pwd)"
tools="${TENURE_TOOLS_DIR:-/var/tmp/tenure-tools}"

die() { printf '%s/build.sh: %s\n' "$name" "$*" >&2; exit 1; }

for cmd in node npm cc; do
  command -v "$cmd" >/dev/null 2>&1 ||
    die "$cmd is not installed (Debian: apt-get install nodejs npm gcc; .ci/run installs them)"
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
    cd "$here" && sha256sum build.sh fixed-entropy.c
    cd "$app" && sha256sum app.js
    cd "$sdk" && sha256sum tenure.js
    cd "$wit" && find . -type f -name '*.wit' | LC_ALL=C sort | xargs sha256sum
  } | sha256sum | cut -d' ' -f1
)"
kept="$tools/builds/$name-$key.wasm"

if [ ! -f "$kept" ] || [ "${TENURE_PLUGIN_REBUILD:-0}" = 1 ]; then
  # componentize-js records its working directory and its temporary directory in the
  # component: both are fixed paths, so one build at a time on this machine.
  work="/tmp/tenure-build-$name"
  exec 8>"$work.lock"
  flock 8
  rm -rf "$work"
  mkdir -p "$work/src" "$work/tmp"
  trap 'rm -rf "$work"' EXIT
  cp "$app/app.js" "$sdk/tenure.js" "$work/src/"
  touch -d "@${SOURCE_DATE_EPOCH:-0}" "$work/src/app.js" "$work/src/tenure.js"
  cc -shared -fPIC -O2 -o "$work/fixed-entropy.so" "$here/fixed-entropy.c" -ldl ||
    die "cannot build fixed-entropy.so (Debian: apt-get install gcc)"
  wizer="$(cd "$install" && node --input-type=module \
    -e "import w from '@bytecodealliance/wizer'; console.log(w)")" ||
    die "cannot find the wizer binary of @bytecodealliance/wizer in $install"
  # componentize-js runs Wizer with an environment of its own (no LD_PRELOAD from ours),
  # but lets us name the binary: a wrapper that preloads fixed-entropy.so.
  printf "#!/bin/sh\nLD_PRELOAD='%s' exec '%s' \"\$@\"\n" "$work/fixed-entropy.so" "$wizer" >"$work/wizer"
  chmod +x "$work/wizer"
  (cd "$work/src" && TMPDIR="$work/tmp" node --random-seed=1 \
    "$install/node_modules/@bytecodealliance/componentize-js/src/cli.js" app.js \
    --wit "$wit" -n owned-task --wizer-bin "$work/wizer" -o "$work/out.wasm" >/dev/null) ||
    die "componentize-js failed"
  mv "$work/out.wasm" "$kept.tmp$$"
  mv "$kept.tmp$$" "$kept"
  rm -rf "$work"
  trap - EXIT
  flock -u 8
  how=built
else
  how=reused
fi
flock -u 9

mkdir -p "$(dirname "$out")"
cp "$kept" "$out.tmp$$"
mv "$out.tmp$$" "$out"
echo "$name: $how $out sha256:$(sha256sum <"$out" | cut -d' ' -f1)"
