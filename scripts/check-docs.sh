#!/usr/bin/env bash
# The dialect and pass references in docs/ are generated from ODS by
# mlir-tblgen (the add_mlir_doc calls in dialects/*/IR and
# dialects/*/Transforms make the same files in build/docs with
# `ninja mlir-doc`). This regenerates them into OUT and fails, with a diff,
# when a committed copy differs (the ctest 'docs'); --update rewrites the
# committed copies instead. A change to a .td file updates them in the same
# commit.
#   bash scripts/check-docs.sh [--update] [--tblgen PATH] [--mlir-include DIR]
#                              [--out DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
TBLGEN=/usr/lib/llvm-22/bin/mlir-tblgen
OUT="${BUILD_DIR:-build}/docs/check"
UPDATE=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --update) UPDATE=1 ;;
    --tblgen) TBLGEN="$2"; shift ;;
    --mlir-include) MLIR_INCLUDE="$2"; shift ;;
    --out) OUT="$2"; shift ;;
    *) echo "check-docs.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
INCLUDES=(-I dialects -I "${MLIR_INCLUDE:-$(dirname "$TBLGEN")/../include}")

# committed file | td file | generator flags (as in the add_mlir_doc calls)
DOCS=(
  "docs/Dialects/LLMDialect.md|dialects/LLM/IR/LLMOps.td|-gen-dialect-doc -dialect=llm"
  "docs/Passes/LLMPasses.md|dialects/LLM/Transforms/Passes.td|-gen-pass-doc"
  "docs/Passes/CompilerPasses.md|lib/Compiler/Passes.td|-gen-pass-doc"
  "docs/Dialects/ExecDialect.md|dialects/Exec/IR/ExecOps.td|-gen-dialect-doc -dialect=exec"
  "docs/Passes/ExecPasses.md|dialects/Exec/Transforms/Passes.td|-gen-pass-doc"
)

mkdir -p "$OUT"
stale=()
for entry in "${DOCS[@]}"; do
  IFS='|' read -r doc td flags <<<"$entry"
  fresh="$OUT/$(basename "$doc")"
  # shellcheck disable=SC2086 # flags are words
  "$TBLGEN" $flags "${INCLUDES[@]}" "$td" -o "$fresh"
  if [[ $UPDATE == 1 ]]; then
    cmp -s "$fresh" "$doc" || { cp "$fresh" "$doc"; echo "updated $doc"; }
  elif ! diff -u "$doc" "$fresh"; then
    stale+=("$doc")
  fi
done
if [[ ${#stale[@]} -gt 0 ]]; then
  echo "check-docs.sh: ${stale[*]} differ from what mlir-tblgen generates" \
       "from the current .td files (diff above); update them with:" >&2
  echo "  bash scripts/check-docs.sh --update" >&2
  exit 1
fi
