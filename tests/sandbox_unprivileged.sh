#!/usr/bin/env bash
# The hostile sandbox suites again, as an unprivileged user (as root, `make test` runs it through
# tests/tasks/test_sandbox_unprivileged.py; CI is root). bubblewrap then runs without privileges,
# in a user namespace of its own, which is the path every non-root user of the library takes.
# The launcher tests (interpreters and venvs under /tmp, no silent fallback) and the answer-key
# searches run there too.
#
# The venv's interpreter may live where other users cannot reach it (pyenv under /root, mode
# 0700): for the length of the run the folders above it get o+x (enter, not list), and their
# modes are put back afterwards, whatever happens.
set -euo pipefail
cd "$(dirname "$0")/.."
USER_NAME=${SANDBOX_TEST_USER:-pettingllms-sbx-test}
PY=${PY:-.venv/bin/python}
if [ "$(id -u)" != 0 ]; then
  echo "sandbox_unprivileged.sh: already unprivileged; run the suite directly" >&2
  exec "$PY" -m pytest -q -p no:cacheprovider tests/tasks/test_sandbox_hostile.py \
    tests/tasks/test_sandbox_pair.py tests/tasks/test_sandbox_launchers.py \
    tests/tasks/test_sandbox_answers.py
fi
id "$USER_NAME" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$USER_NAME"
base=$("$PY" -c "import sys; print(sys.base_prefix)")
restore=()
for start in "$base" "$(pwd)"; do  # the interpreter's folders and the checkout's, enterable
  dir=$start
  while [ "$dir" != / ]; do
    if ! runuser -u "$USER_NAME" -- test -x "$dir" 2>/dev/null; then
      restore+=("$(stat -c %a "$dir") $dir")
      chmod o+x "$dir"
    fi
    dir=$(dirname "$dir")
  done
done
put_back() { for entry in "${restore[@]}"; do chmod "${entry%% *}" "${entry#* }"; done; }
trap put_back EXIT
home=$(mktemp -d)
chown "$USER_NAME" "$home"
runuser -u "$USER_NAME" -- env HOME="$home" PATH=/usr/bin:/bin \
  "$PY" -m pytest -q -p no:cacheprovider tests/tasks/test_sandbox_hostile.py \
    tests/tasks/test_sandbox_pair.py tests/tasks/test_sandbox_launchers.py \
    tests/tasks/test_sandbox_answers.py
rm -rf "$home"
