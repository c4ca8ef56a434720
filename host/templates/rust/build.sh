#!/usr/bin/env bash
# Builds {{name}}.wasm beside {{name}}.toml: `cargo build --release` for wasm32-wasip2
# (.cargo/config.toml), then a copy of the component out of cargo's target dir.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"
cargo build --release
target="${CARGO_TARGET_DIR:-$here/target}"
cp "$target/wasm32-wasip2/release/{{crate}}.wasm" "$here/{{name}}.wasm"
echo "built $here/{{name}}.wasm"
