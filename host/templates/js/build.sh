#!/usr/bin/env bash
# Builds {{name}}.wasm beside {{name}}.toml from app.js, with the Tenure checkout's pinned
# componentize-js and its SDK (sdk/js/tenure.js) beside app.js. The first build installs
# componentize-js into $TENURE_TOOLS_DIR (default /var/tmp/tenure-tools); it needs node,
# npm and cc.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
exec bash "{{tenure}}/sdk/js/build.sh" "$here/{{name}}.wasm" "$here"
