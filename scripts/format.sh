#!/usr/bin/env bash
# Formats kiln's C++/CUDA sources with the checked-in .clang-format (clang-format 14, Debian 12's
# `clang-format-14`; other versions break lines differently). third_party/ is left as vendored.
# Usage: scripts/format.sh            format every source git tracks or would add (new files too)
#        scripts/format.sh --check    change nothing; list the files that are not formatted and
#                                     exit 1 if there are any (ctest `source_format` runs this)
set -euo pipefail
cd "$(dirname "$0")/.."
CF=${CLANG_FORMAT:-$(command -v clang-format-14 || command -v clang-format || true)}
if [[ -z "$CF" ]]; then
  echo "format.sh: clang-format 14 not found (Debian: apt-get install clang-format-14; scripts/install_deps.sh installs it)" >&2
  exit 77
fi
if ! "$CF" --version | grep -q "version 14\."; then
  echo "format.sh: $CF is not clang-format 14 ($("$CF" --version)); the format is defined by version 14, skipping" >&2
  exit 77
fi
mapfile -t files < <(git ls-files --cached --others --exclude-standard -- '*.cpp' '*.h' '*.cu' '*.cuh' '*.hpp' '*.cc' 2>/dev/null | grep -v '^third_party/' ||
                     find src include tools tests plugins python serving bench examples \
                       -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh')
if [[ "${1:-}" == "--check" ]]; then
  bad=()
  for f in "${files[@]}"; do
    [[ -f "$f" ]] || continue
    "$CF" --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
  done
  if (( ${#bad[@]} )); then
    printf 'not formatted: %s\n' "${bad[@]}"
    echo "format.sh: ${#bad[@]} of ${#files[@]} files differ from .clang-format; run scripts/format.sh" >&2
    exit 1
  fi
  echo "format.sh: ${#files[@]} files formatted"
else
  "$CF" -i "${files[@]}"
  echo "format.sh: formatted ${#files[@]} files"
fi
