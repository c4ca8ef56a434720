#!/usr/bin/env bash
# Builds a JavaScript plugin written with this SDK: sdk/js/build.sh OUT.wasm APP_DIR
# builds APP_DIR/app.js, with tenure.js beside it, into OUT.wasm. It is the repository's
# one JavaScript build (plugins/counter-js/build.sh): the pinned componentize-js,
# installed once into $TENURE_TOOLS_DIR (default /var/tmp/tenure-tools), a reproducible
# build, and the result kept under the digest of its inputs. Projects made by
# `tenure plugin new --lang js` call it from their build.sh.
set -euo pipefail
[ "$#" -eq 2 ] || { echo "usage: sdk/js/build.sh OUT.wasm APP_DIR" >&2; exit 2; }
here="$(cd "$(dirname "$0")" && pwd)"
exec bash "$here/../../plugins/counter-js/build.sh" "$1" "$2"
