#!/usr/bin/env bash
# Checks that every tracked C++ file is as clang-format (.clang-format) writes it; prints the
# files that are not (fix: clang-format -i FILE). Exit status 1 if there is any, 77 (skipped)
# without clang-format or outside a git checkout. Usage: scripts/check_format.sh [source root]
set -uo pipefail
cd "${1:-$(dirname "$0")/..}"
command -v clang-format >/dev/null 2>&1 || { echo "check_format: no clang-format" >&2; exit 77; }
files=$(git ls-files '*.cpp' '*.h' 2>/dev/null) || { echo "check_format: not a git checkout" >&2; exit 77; }
# One run over every file; its diagnostics start with the file's name.
bad=$(echo "$files" | xargs clang-format --dry-run 2>&1 | grep -oE '^[^:]+:[0-9]+:[0-9]+: (warning|error)' | cut -d: -f1 | sort -u)
if [ -n "$bad" ]; then
  echo "$bad" | sed 's/^/not clang-formatted: /'
  exit 1
fi
echo "check_format: $(echo "$files" | wc -l) files formatted"
