#!/usr/bin/env bash
# setup.sh — install what a fresh Debian 12 / Ubuntu machine lacks to build fastattn.
#
#   bash tools/scripts/setup.sh            # everything run-tests.sh needs (GoogleTest too)
#   bash tools/scripts/setup.sh --main     # what run-main.sh needs (no GoogleTest; matplotlib)
#
# Idempotent: installs only what is missing, so a prepared machine pays nothing and needs no
# network. Tools (cmake, ninja, g++, git, python3) count as present when they are on PATH,
# whoever installed them; libraries when dpkg knows their package.
#
# Offline: FASTATTN_OFFLINE_DEBS=<dir of .deb files> (from `apt-get download ...`) is used
# instead of apt-get for missing packages. The .debs are unpacked with `dpkg -x` into
# FASTATTN_DEPS_PREFIX (default /opt/fastattn-deps; without root, build/deps), which does not
# touch dpkg's database, so debs of another release (Debian 12 debs on Ubuntu 24.04) do no
# harm; then <prefix>/env.sh exports CMAKE_PREFIX_PATH, CPATH, LIBRARY_PATH and
# LD_LIBRARY_PATH for CMake to find them (run-main.sh sources it).
#
# What cannot be installed is reported and setup goes on: a library installed another way
# (from source, under /usr/local) is still found by CMake, which then gives the real error.
# Environment: PYTHON (default python3): the interpreter whose matplotlib --main checks.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
mode=tests
case "${1:-}" in
  --main) mode=main ;;
  "" | --tests) ;;
  -h | --help) sed -n '2,20p' "$0"; exit 0 ;;
  *) echo "setup.sh: expected --main or --tests, got '$1'" >&2; exit 2 ;;
esac
python=${PYTHON:-python3}

# command -> Debian package, for tools that may come from elsewhere (pip's cmake, pyenv).
declare -A tool_package=([cmake]=cmake [ninja]=ninja-build [g++]=g++ [git]=git [python3]=python3
                         [pkg-config]=pkg-config)
libraries=(libcli11-dev libfmt-dev nlohmann-json3-dev libopenblas-dev)
[ "$mode" = tests ] && libraries+=(libgtest-dev libgmock-dev)

missing=()
for tool in "${!tool_package[@]}"; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("${tool_package[$tool]}")
done
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for p in "${libraries[@]}"; do
  installed "$p" || missing+=("$p")
done
if [ "$mode" = tests ] && ! "$python" -m pip --version >/dev/null 2>&1; then
  missing+=(python3-pip python3-venv)
fi
# The main job plots with matplotlib; Debian's own Python gets it from apt (pip refuses to
# install into it), any other Python from pip below.
need_matplotlib=0
if [ "$mode" = main ] && ! "$python" -c "import matplotlib" >/dev/null 2>&1; then
  if [ "$(command -v "$python")" = /usr/bin/python3 ] && command -v apt-get >/dev/null; then
    missing+=(python3-matplotlib)
  else
    need_matplotlib=1
  fi
fi

sudo_cmd=()
[ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && sudo_cmd=(sudo)

# Offline: unpack the folder's .debs (all of them: the -dev packages need their runtime
# libraries, e.g. libfmt9, libopenblas0-pthread) into the prefix.
offline_unpack() {
  local dir=$1 prefix
  prefix=${FASTATTN_DEPS_PREFIX:-}
  if [ -z "$prefix" ]; then
    if mkdir -p /opt/fastattn-deps 2>/dev/null && [ -w /opt/fastattn-deps ]; then prefix=/opt/fastattn-deps
    else prefix=$root/build/deps; fi
  fi
  mkdir -p "$prefix"
  local n=0 deb
  for deb in "$dir"/*.deb; do
    [ -f "$deb" ] || continue
    dpkg -x "$deb" "$prefix"
    n=$((n + 1))
  done
  if [ "$n" -eq 0 ]; then
    echo "setup: FASTATTN_OFFLINE_DEBS=$dir holds no .deb files" >&2
    return 1
  fi
  local arch
  arch=$(gcc -dumpmachine 2>/dev/null || echo x86_64-linux-gnu)
  arch=${arch/-pc-/-}
  local usr=$prefix/usr libdirs="$prefix/usr/lib/$arch:$prefix/usr/lib/$arch/openblas-pthread:$prefix/usr/lib"
  # Headers: the plain include dir and the arch one (openblas-pthread's cblas.h lives under it).
  cat > "$prefix/env.sh" <<EOF
# Written by tools/scripts/setup.sh from the .debs in $dir: source it before CMake.
export CMAKE_PREFIX_PATH="$usr\${CMAKE_PREFIX_PATH:+:\$CMAKE_PREFIX_PATH}"
export CPATH="$usr/include:$usr/include/$arch\${CPATH:+:\$CPATH}"
export LIBRARY_PATH="$libdirs\${LIBRARY_PATH:+:\$LIBRARY_PATH}"
export LD_LIBRARY_PATH="$libdirs\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
EOF
  echo "setup: unpacked $n .debs from $dir into $prefix; environment in $prefix/env.sh"
}

if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: missing ${missing[*]}"
  if [ -n "${FASTATTN_OFFLINE_DEBS:-}" ]; then
    offline_unpack "$FASTATTN_OFFLINE_DEBS"
  elif command -v apt-get >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    if ! { "${sudo_cmd[@]}" apt-get update -qq &&
           "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"; }; then
      echo "setup: could not install ${missing[*]} (no network? then set" \
           "FASTATTN_OFFLINE_DEBS=<dir of .debs>); going on, the build says what it lacks" >&2
    fi
  else
    echo "setup: no apt-get here; install ${missing[*]} by hand (or FASTATTN_OFFLINE_DEBS)" >&2
  fi
fi

if [ "$need_matplotlib" = 1 ]; then
  "$python" -m pip install --quiet --disable-pip-version-check matplotlib >/dev/null 2>&1 ||
    echo "setup: matplotlib is missing for $python and pip could not install it; no plots" >&2
fi
exit 0
