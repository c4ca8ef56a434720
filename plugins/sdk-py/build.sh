#!/usr/bin/env bash
# Builds the Python SDK fixture into a component: plugins/sdk-py/build.sh [OUT.wasm]
# (default OUT: sdk-py.wasm in the current directory), with counter-py's build script:
# the same pinned componentize-py, sdk/python/tenure.py beside app.py.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
exec bash "$here/../counter-py/build.sh" "${1:-sdk-py.wasm}" "$here"
