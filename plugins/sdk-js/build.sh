#!/usr/bin/env bash
# Builds the JavaScript SDK fixture into a component: plugins/sdk-js/build.sh [OUT.wasm]
# (default OUT: sdk-js.wasm in the current directory), with counter-js's build script:
# the same pinned componentize-js, the same reproducible build, sdk/js/tenure.js beside
# app.js.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
exec bash "$here/../counter-js/build.sh" "${1:-sdk-js.wasm}" "$here"
