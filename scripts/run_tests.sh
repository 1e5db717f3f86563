#!/usr/bin/env bash
# Run the tests: the package's, and every chapter once in smoke mode from the installed wheel in an
# empty folder (tests/book/test_colab_wheel.py; a failing cell fails it, all nbval's lax mode checks).
# Extra arguments go to pytest: `bash scripts/run_tests.sh book -x` also runs the checkout's notebooks
# with nbval; with no paths, pytest takes testpaths (tests) from pyproject.toml.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
python -m pytest --nbval-lax "$@"
