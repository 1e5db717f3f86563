#!/usr/bin/env bash
# Run the unit tests and execute every notebook with nbval.
# Extra arguments go to pytest, e.g. `bash scripts/run_tests.sh book -x`;
# with no paths, pytest takes testpaths (tests, book) from pyproject.toml.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
python -m pytest --nbval-lax "$@"
