#!/usr/bin/env bash
# Builds a Python plugin written with this SDK: sdk/python/build.sh OUT.wasm APP_DIR
# builds APP_DIR/app.py, with tenure.py on its path, into OUT.wasm. It is the repository's
# one Python build (plugins/counter-py/build.sh): the pinned componentize-py, installed
# once into $TENURE_TOOLS_DIR (default /var/tmp/tenure-tools), and the result kept under
# the digest of its inputs. Projects made by `tenure plugin new --lang python` call it
# from their build.sh.
set -euo pipefail
[ "$#" -eq 2 ] || { echo "usage: sdk/python/build.sh OUT.wasm APP_DIR" >&2; exit 2; }
here="$(cd "$(dirname "$0")" && pwd)"
exec bash "$here/../../plugins/counter-py/build.sh" "$1" "$2"
