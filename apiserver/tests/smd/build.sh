#!/usr/bin/env bash
# Builds the structured-merge-diff harness (main.go) offline against Debian's Go packages:
# golang-go, golang-k8s-sigs-structured-merge-diff-dev (structured-merge-diff 4.1.2) and its
# dependencies (json-iterator, modern-go/reflect2 and concurrent, yaml.v2), all from
# /usr/share/gocode. Go's module mode wants a go.mod in every replaced directory and
# modern-go/concurrent ships none, so the build happens in OUT/build with a go.mod written here,
# a copy of that one package given a go.mod, and empty stand-ins for the test-only modules
# (gofuzz, testify, go-spew, check.v1) that the dependencies' go.mod files name.
#
# Usage: build.sh OUT   (writes OUT/smd-harness)
set -euo pipefail
out=${1:?usage: build.sh OUT}
here=$(cd "$(dirname "$0")" && pwd)
gocode=/usr/share/gocode/src
smd=$gocode/sigs.k8s.io/structured-merge-diff
[ -f "$smd/go.mod" ] || { echo "missing $smd: apt-get install golang-k8s-sigs-structured-merge-diff-dev" >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
b=$out/build
rm -rf "$b"
mkdir -p "$b/harness" "$b/stub/concurrent"
cp "$here/main.go" "$b/harness/"
cp "$gocode/github.com/modern-go/concurrent/"*.go "$b/stub/concurrent/"
rm -f "$b/stub/concurrent/"*_test.go
printf 'module github.com/modern-go/concurrent\n\ngo 1.12\n' > "$b/stub/concurrent/go.mod"
for m in gofuzz testify go-spew check; do
  mkdir -p "$b/stub/$m"
  printf 'module stub/%s\n\ngo 1.19\n' "$m" > "$b/stub/$m/go.mod"
done
cat > "$b/harness/go.mod" <<MOD
module smdharness

go 1.19

require sigs.k8s.io/structured-merge-diff/v4 v4.1.2

replace (
	github.com/davecgh/go-spew => ../stub/go-spew
	gopkg.in/check.v1 => ../stub/check
	github.com/google/gofuzz => ../stub/gofuzz
	github.com/json-iterator/go => $gocode/github.com/json-iterator/go
	github.com/modern-go/concurrent => ../stub/concurrent
	github.com/modern-go/reflect2 => $gocode/github.com/modern-go/reflect2
	github.com/stretchr/testify => ../stub/testify
	gopkg.in/yaml.v2 => $gocode/gopkg.in/yaml.v2
	sigs.k8s.io/structured-merge-diff/v4 => $smd
)
MOD
cd "$b/harness"
GOFLAGS=-mod=mod GOPROXY=off GOSUMDB=off GOTOOLCHAIN=local GOCACHE="$out/gocache" \
  go build -o "$out/smd-harness" .
