#!/usr/bin/env bash
# setup.sh — install what a fresh Debian 12 machine lacks to build and test fastattn.
# Idempotent: installs only missing packages, so a prepared machine pays nothing.
set -euo pipefail

packages=(cmake ninja-build g++ pkg-config libgtest-dev libgmock-dev libcli11-dev libfmt-dev
          nlohmann-json3-dev libopenblas-dev python3 python3-pip python3-venv git)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Python may come from elsewhere (pyenv); then python3/pip need no Debian package.
if command -v python3 >/dev/null && python3 -m pip --version >/dev/null 2>&1; then
  filtered=()
  for p in "${missing[@]}"; do
    case "$p" in python3|python3-pip|python3-venv) ;; *) filtered+=("$p") ;; esac
  done
  missing=("${filtered[@]+"${filtered[@]}"}")
fi
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
