#!/usr/bin/env bash
# kmeta's resident memory with 100 CompositeControllers whose sync hooks are Jsonnet programs
# (each its own inline program, compiled when the controller is built) against 100 with webhook
# hooks, measured 15 s after the last controller started (the blocking threads that parsed the
# programs have gone by then). Not a timed test: run it by hand, both modes side by side.
# Usage: tests/benches/jsonnet_controllers_rss.sh jsonnet|webhook BIN_DIR
#   (BIN_DIR holds kmeta and kmeta-apiserver, e.g. target/debug; kubectl on PATH)
set -euo pipefail
mode=$1; bin=$2; dir=$(mktemp -d)
"$bin/kmeta-apiserver" --port 0 --kubeconfig-out "$dir/kc" > "$dir/api.log" 2>&1 & api=$!
trap 'kill $api ${ctl:-} 2>/dev/null || true' EXIT
for _ in $(seq 100); do [ -s "$dir/kc" ] && break; sleep 0.1; done
K="kubectl --kubeconfig $dir/kc"
"$bin/kmeta" crds | $K apply -f - > /dev/null
cat <<CRD | $K apply -f - > /dev/null
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: things.mem.example.com}
spec:
  group: mem.example.com
  scope: Namespaced
  names: {plural: things, singular: thing, kind: Thing}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
CRD
for i in $(seq 1 100); do
  if [ "$mode" = jsonnet ]; then
    hook="jsonnet: {source: 'function(request) { status: {controller: $i, name: request.parent.metadata.name}, children: [] }'}"
  else
    hook="webhook: {url: 'http://127.0.0.1:9/sync'}"
  fi
  cat <<CC
---
apiVersion: metacontroller.k8s.io/v1alpha1
kind: CompositeController
metadata: {name: cc-$i}
spec:
  generateSelector: true
  parentResource: {apiVersion: mem.example.com/v1, resource: things, labelSelector: {matchLabels: {cc: "$i"}}}
  hooks:
    sync: {$hook}
CC
done | $K apply -f - > /dev/null
"$bin/kmeta" run --kubeconfig "$dir/kc" --metrics-address 0 --health-probe-bind-address 0 > "$dir/ctl.log" 2>&1 & ctl=$!
# settled: wait until 100 controllers are reported started, then 5 s more
for _ in $(seq 600); do
  n=$(grep -c 'reconcile::manager: started kind' "$dir/ctl.log" || true)
  [ "$n" -ge 100 ] && break; sleep 0.1
done
sleep 15
echo "$mode: $(grep VmRSS /proc/$ctl/status) (controllers started: $(grep -c 'reconcile::manager: started kind' "$dir/ctl.log" || true))"
