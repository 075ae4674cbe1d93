//go:build tools

// Package controlplane only pins the binaries mk/controlplane.mk builds, so that
// `go mod tidy` keeps their requirements.
package controlplane

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
