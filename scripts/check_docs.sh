#!/usr/bin/env bash
# Checks that every reference to a Markdown document in the tree resolves inside the repository,
# so that a clone stands alone (docs/STYLE.md). Scans README.md, docs/, models/, src/, apps/,
# tests/ (in tests/data only its .md, .sh and .py files), tools/, bench/ and scripts/ for names
# ending in ".md" (a path, a bare name, a ../ path or a Markdown link target) and resolves each
# relative to the referring file's folder, then to the repository root. URLs are skipped. Also
# fails on any mention of the parent folder named "shared" (outside the repository).
# Prints file:line and the missing target for each failure and exits 1; otherwise prints one
# summary line and exits 0. Needs bash, GNU grep and sed only. Usage: scripts/check_docs.sh
# (ctest: docs.ReferencesResolve).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd -P)

# Text files to scan, NUL-separated.
list_files() {
  local d
  [ -f README.md ] && printf '%s\0' README.md
  for d in docs models src apps tools bench scripts tests; do
    [ -d "$d" ] || continue
    find "$d" \( -name node_modules -o -name .git -o -path tests/data \) -prune -o \
      -type f -print0
  done
  if [ -d tests/data ]; then
    find tests/data -type f \( -name '*.md' -o -name '*.sh' -o -name '*.py' \) -print0
  fi
}

mapfile -d '' files < <(list_files)

# A reference: a run of path characters that ends in ".md" at a word end. Delimiters are
# whitespace, quotes, brackets, parentheses, backticks, and , ; : * | < > =.
ref_re='[^][(){}<>"'"'"'`[:space:],;:*|=]*[A-Za-z0-9_-][.]md\b'

n_refs=0
n_bad=0
declare -A seen_targets=()
bad_lines=()

while IFS= read -r hit; do
  # hit = file:line:token (grep -o prints each token on its own line with the prefix).
  file=${hit%%:*}
  rest=${hit#*:}
  line=${rest%%:*}
  token=${rest#*:}
  case "$token" in
    //*|*://*|http*|www.*) continue ;;  # a URL, split at its scheme's colon
  esac
  token=${token#./}
  n_refs=$((n_refs + 1))
  dir=$(dirname "$file")
  found=
  if [[ "$token" != /* ]]; then
    for cand in "$dir/$token" "$token"; do
      # Only files inside the repository count.
      if [ -f "$cand" ] && [[ "$(realpath -m "$cand")" == "$root"/* ]]; then
        found=1
        break
      fi
    done
  fi
  if [ -n "$found" ]; then
    seen_targets["$token"]=1
    continue
  fi
  bad_lines+=("$file:$line: missing $token")
  n_bad=$((n_bad + 1))
done < <(grep -HnoIE "$ref_re" -- "${files[@]}" 2>/dev/null || true)

# Mentions of a folder outside the repository (built from parts so this file does not match).
outside="../""shared"
while IFS= read -r hit; do
  bad_lines+=("${hit%%:${outside}*}: mentions $outside (outside the repository)")
  n_bad=$((n_bad + 1))
done < <(grep -HnoIF -- "$outside" "${files[@]}" 2>/dev/null || true)

if [ "$n_bad" -gt 0 ]; then
  printf '%s\n' "${bad_lines[@]}"
  echo "check_docs: $n_bad dangling reference(s) in ${#files[@]} files" >&2
  exit 1
fi
echo "check_docs: ok, $n_refs references to ${#seen_targets[@]} documents resolve" \
  "(${#files[@]} files)"
