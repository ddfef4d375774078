// A stand-in for the three k8s.io/apimachinery packages Metacontroller's pkg/dynamic/apply
// imports (Go modules cannot be downloaded here). Each function does what apimachinery's does
// (same copies, same conversions), written for this harness.
module k8s.io/apimachinery

go 1.19

require sigs.k8s.io/json v0.0.0

replace sigs.k8s.io/json => /usr/share/gocode/src/sigs.k8s.io/json
