#!/usr/bin/env bash
# Installs what mla.cpp needs to build and test on Debian 12. Idempotent: a second run does
# nothing but check. Uses sudo when not root. Creates the Python test venv in .venv.
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(
  build-essential cmake ninja-build pkg-config git
  libboost-dev libboost-system-dev
  nlohmann-json3-dev libpcre2-dev libspdlog-dev libfmt-dev libcli11-dev libxxhash-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  openmpi-bin libopenmpi-dev
  clang libclang-rt-14-dev clang-format clang-tidy
  python3 python3-venv python3-pip
  curl
  dpkg-dev  # dpkg-shlibdeps: the Depends of the .deb (cpack -G DEB, packaging/)
  chromium chromium-driver  # tests/py/test_chat_page.py: the chat page in a headless browser
)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing Debian packages: ${missing[*]}"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# The Python venv for tests. Debian's python3 is used (not whatever is first on PATH) so the
# venv does not depend on a developer's pyenv.
PY=/usr/bin/python3
REQ=tools/requirements-test.txt
STAMP=.venv/.requirements.sha
want=$(sha256sum "$REQ" | cut -d' ' -f1)
if [ ! -x .venv/bin/python ] || [ "$(cat "$STAMP" 2>/dev/null)" != "$want" ]; then
  echo "install-deps: creating Python venv .venv from $REQ"
  [ -x .venv/bin/python ] || "$PY" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r "$REQ"
  echo "$want" > "$STAMP"
fi
# xgrammar's C++ core (structured outputs), built from its sdist into ~/.cache/mla, once.
bash scripts/build-xgrammar.sh >/dev/null
echo "install-deps: ok"
