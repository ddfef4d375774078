#!/usr/bin/env bash
# Side by side: dynapply's apply_update against Metacontroller's child-update path (decode
# last-applied, Merge, revert server fields, encode the annotation, DeepEqual), on the same
# input files, alternating Go and Rust runs, then the medians and their ratios.
#
# Usage: dynapply/benches/go/run.sh METACONTROLLER [ROUNDS] [MILLIS]
#   METACONTROLLER: a checkout of github.com/metacontroller/metacontroller, or its git directory.
#   Its pkg/dynamic/apply/apply.go is used unmodified, from a temporary build directory (never
#   copied into this tree). The three k8s.io/apimachinery packages it imports are stood in for by
#   ./apimachinery (same behaviour, see there), with sigs.k8s.io/json from Debian's
#   golang-k8s-sigs-json-dev (/usr/share/gocode). Needs: go (Debian golang-go), cargo.
set -euo pipefail
src=${1:?usage: run.sh METACONTROLLER [ROUNDS] [MILLIS]}
rounds=${2:-5}
millis=${3:-300}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

mkdir -p "$work/metacontroller/pkg/dynamic/apply"
if [ -f "$src/pkg/dynamic/apply/apply.go" ]; then
  cp "$src/pkg/dynamic/apply/apply.go" "$work/metacontroller/pkg/dynamic/apply/"
else
  git -C "$src" show HEAD:pkg/dynamic/apply/apply.go > "$work/metacontroller/pkg/dynamic/apply/apply.go"
  echo "metacontroller $(git -C "$src" rev-parse HEAD)"
fi
printf 'module metacontroller\n\ngo 1.19\n' > "$work/metacontroller/go.mod"
cp -r "$here/apimachinery" "$here/harness" "$work/"
cat > "$work/harness/go.mod" <<MOD
module harness

go 1.19

require (
	k8s.io/apimachinery v0.0.0
	metacontroller v0.0.0
	sigs.k8s.io/json v0.0.0
)

replace (
	k8s.io/apimachinery => ../apimachinery
	metacontroller => ../metacontroller
	sigs.k8s.io/json => /usr/share/gocode/src/sigs.k8s.io/json
)
MOD
(cd "$work/harness" && GOFLAGS=-mod=mod GOPROXY=off GOSUMDB=off GOCACHE="$work/gocache" \
  go build -o "$work/go-harness" .)
go version

cd "$here/../../.."
CARGO_INCREMENTAL=0 cargo build -q --release -p dynapply --example update_path \
  --example update_path_mimalloc
rust=${CARGO_TARGET_DIR:-target}/release/examples/update_path
"$rust" dump "$work/data"

: > "$work/results"
for _ in $(seq "$rounds"); do
  "$work/go-harness" "$work/data" 1 "$millis" >> "$work/results"
  "$rust" time "$work/data" 1 "$millis" >> "$work/results"
  "${rust}_mimalloc" time "$work/data" 1 "$millis" | sed 's/^rust/rust+mimalloc/' >> "$work/results"
done

# medians over the rounds per (language and allocator, size, row), then Go / Rust per size and
# row: Go's `update` row is the reference for `update`, `update_cached` and `update_recorded`
printf "%-6s %-34s %12s %12s %8s\n" size "row (rust, allocator)" "go ns/op" "rust ns/op" "go/rust"
sort -k1,1 -k2,2 -k3,3 -k4,4n "$work/results" | awk '
  { key = $1 " " $2 " " $3; v[key, ++n[key]] = $4; keys[key] = 1 }
  END {
    for (k in keys) { c = n[k]; m = (c % 2) ? v[k, (c + 1) / 2] : (v[k, c / 2] + v[k, c / 2 + 1]) / 2; med[k] = m }
    split("1x5 5x20 20x50", sizes, " ")
    split("update update_noop merge", gorows, " ")
    for (s = 1; s <= 3; s++) for (k in keys) {
      split(k, p, " "); if (p[1] == "go" || p[2] != sizes[s]) continue
      row = p[3]; gorow = row; gsub(/_cached|_recorded|_parsed/, "", gorow)
      g = med["go " sizes[s] " " gorow]
      alloc = (p[1] == "rust") ? "system" : "mimalloc"
      printf "%-6s %-34s %12.0f %12.0f %7.1fx\n", sizes[s], row " (" alloc ")", g, med[k], g / med[k]
    }
  }' | sort -k1,1V -k2,2
