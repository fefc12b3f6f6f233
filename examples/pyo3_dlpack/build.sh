#!/usr/bin/env bash
# Builds the extension and copies it beside check.py under the name Python imports
# (cudasem_dlpack.abi3.so: the stable ABI, for every CPython from 3.9 on this platform).
set -euo pipefail
cd "$(dirname "$0")"
cargo build --release
cp target/release/libcudasem_dlpack.so cudasem_dlpack.abi3.so
echo "built $(pwd)/cudasem_dlpack.abi3.so"
