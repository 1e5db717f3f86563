#!/usr/bin/env bash
# Build the executed book into _build/html; any warning or failing cell fails it.
# Extra arguments go to `jupyter-book build`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
jupyter-book build -W -n --keep-going "$@" .
echo "book: $PWD/_build/html/index.html"
