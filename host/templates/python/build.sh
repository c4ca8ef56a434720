#!/usr/bin/env bash
# Builds {{name}}.wasm beside {{name}}.toml from app.py, with the Tenure checkout's pinned
# componentize-py and its SDK (sdk/python/tenure.py) on the path. The first build
# installs componentize-py into $TENURE_TOOLS_DIR (default /var/tmp/tenure-tools).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
exec bash "{{tenure}}/sdk/python/build.sh" "$here/{{name}}.wasm" "$here"
