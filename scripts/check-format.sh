#!/usr/bin/env bash
# Fails when a C++ source is not formatted with the repository's .clang-format.
set -euo pipefail
cd "$(dirname "$0")/.."
files=$(git ls-files '*.cc' '*.h')
[[ -z "$files" ]] && exit 0
if ! clang-format --dry-run -Werror $files; then
  echo "clang-format: run 'clang-format -i' on the files above" >&2
  exit 1
fi
echo "clang-format: $(echo "$files" | wc -l) files clean"
