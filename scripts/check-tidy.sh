#!/usr/bin/env bash
# Runs clang-tidy (the checks in .clang-tidy) over every C++ source of the repository that the
# build in build/ compiles, two files at a time, and fails on any warning. Needs a configured
# build/ (scripts/build.sh), whose compile_commands.json gives each file its flags.
#   scripts/check-tidy.sh [build-dir] [file...]   (default: build, every source)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
db="$build/compile_commands.json"
if [[ ! -f "$db" ]]; then
  echo "check-tidy: $db not found; configure $build first (scripts/build.sh)" >&2
  exit 1
fi
if (($#)); then
  files=("$@")
else
  # The sources the build compiles, as repository-relative paths (generated files excluded).
  mapfile -t files < <(/usr/bin/python3 - "$db" "$PWD" <<'PY'
import json, os, subprocess, sys
db, root = sys.argv[1], sys.argv[2]
tracked = set(subprocess.run(["git", "ls-files", "*.cc"], capture_output=True, text=True,
                             check=True).stdout.split())
seen = set()
for entry in json.load(open(db)):
    path = os.path.relpath(os.path.join(entry["directory"], entry["file"]), root)
    if path in tracked and path not in seen:
        seen.add(path)
        print(path)
PY
  )
fi
start=$SECONDS
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# --quiet drops clang-tidy's per-file statistics; the "N warnings generated." lines go to stderr.
if ! printf '%s\n' "${files[@]}" |
  xargs -P 2 -n 4 clang-tidy -p "$build" --quiet >"$log" 2>/dev/null; then
  cat "$log"
  echo "clang-tidy: warnings above (checks in .clang-tidy; $((SECONDS - start)) s)" >&2
  exit 1
fi
if grep -q "warning:\|error:" "$log"; then
  cat "$log"
  echo "clang-tidy: warnings above" >&2
  exit 1
fi
echo "clang-tidy: ${#files[@]} files clean ($((SECONDS - start)) s)"
