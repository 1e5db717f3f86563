# Shared set-up for build_book.sh and run_tests.sh; source it, don't run it.
# Idempotent: creates .venv if missing, installs the Python dependencies when their pins
# changed, and activates .venv. Python alone: MathJax comes from a Python package
# (sphinx-mathjax-offline), and the pages carry no widget renderer (book/_ext).
# CAPSEDU_MODE passes through untouched (unset: the package decides).
# Extra pip options (e.g. CI's index of CPU-only torch wheels) come through pip's own
# environment variables, such as PIP_INDEX_URL.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

[ -x .venv/bin/python ] || python3 -m venv .venv
. .venv/bin/activate
python -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
  echo "capsedu needs Python >= 3.11 (the pinned numpy, matplotlib, ipykernel and ipython require it);" \
       ".venv has $(python --version): remove .venv and run again with a newer python3 first on PATH" >&2
  return 1
}

# Reinstall only when requirements.txt or pyproject.toml changed.
py_stamp=$(cat requirements.txt pyproject.toml | sha256sum | cut -d' ' -f1)
if [ "$(cat .venv/.capsedu-stamp 2>/dev/null)" != "$py_stamp" ]; then
  python -m pip install -q -r requirements.txt -e .
  echo "$py_stamp" > .venv/.capsedu-stamp
fi
