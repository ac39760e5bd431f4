#!/usr/bin/env bash
# Installs what is missing, builds, and generates text with the default model (stories260K).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh build
build/bin/kvx generate -p "${1:-Once upon a time}" -n 200
