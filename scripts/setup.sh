# Shared set-up for build_book.sh and run_tests.sh; source it, don't run it.
# Idempotent: creates .venv if missing, installs Python and npm dependencies
# when their pins changed, activates .venv and vendors the book's JS assets.
# CAPSEDU_MODE passes through untouched (unset: the package decides).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

[ -x .venv/bin/python ] || python3 -m venv .venv
. .venv/bin/activate

# Reinstall only when requirements.txt or pyproject.toml changed.
py_stamp=$(cat requirements.txt pyproject.toml | sha256sum | cut -d' ' -f1)
if [ "$(cat .venv/.capsedu-stamp 2>/dev/null)" != "$py_stamp" ]; then
  python -m pip install -q -r requirements.txt -e .
  echo "$py_stamp" > .venv/.capsedu-stamp
fi

# npm ci wipes node_modules, so run it only when the lock file changed.
js_stamp=$(sha256sum web/package-lock.json | cut -d' ' -f1)
if [ "$(cat web/node_modules/.capsedu-stamp 2>/dev/null)" != "$js_stamp" ]; then
  npm ci --prefix web --no-audit --no-fund --ignore-scripts
  echo "$js_stamp" > web/node_modules/.capsedu-stamp
fi

python scripts/vendor_assets.py
