#!/usr/bin/env bash
# volmig demo: the whole system on this machine, no cluster needed.
# Starts the govmomi vCenter simulator and the Kubernetes API test server, applies the CRD
# and a few in-tree PVs, runs `volmig run`, waits for convergence and prints the mapping.
# DEMO_KEEP=1 leaves everything running.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
volmig=$target/debug/volmig
testserver=$target/debug/kube-testserver
vcsim=$target/vcsim/vcsim-harness
work=$(mktemp -d /tmp/volmig-demo.XXXXXX)
pids=()

cleanup() {
  if [ "${DEMO_KEEP:-0}" = 1 ]; then return; fi
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

json() { python3 -c "import json,sys; d=json.loads(sys.stdin.readline()); print($1)"; }

# Waits for the first line of a process's stdout file.
first_line() {
  local file=$1
  for _ in $(seq 1 300); do
    if [ -s "$file" ] && head -n1 "$file" | grep -q '}'; then head -n1 "$file"; return; fi
    sleep 0.1
  done
  echo "timed out waiting for $file" >&2; exit 1
}

echo "== starting the vCenter simulator"
"$vcsim" -listen 127.0.0.1:0 -vmdks 3 -folders kubevols -cert-out "$work/vc-ca.pem" \
  -username demo@vsphere.local -password 'demo-Passw0rd' >"$work/vcsim.out" 2>"$work/vcsim.log" &
pids+=($!)
vc_line=$(first_line "$work/vcsim.out")
vc_url=$(echo "$vc_line" | json 'd["url"]')
vc_admin=$(echo "$vc_line" | json 'd["admin"]')
datastore=$(echo "$vc_line" | json 'd["datastores"][0]["name"]')
echo "   $vc_url (datastore $datastore)"

echo "== starting the Kubernetes API test server"
"$testserver" --listen 127.0.0.1:0 --kubeconfig-out "$work/kubeconfig" >"$work/apiserver.out" 2>"$work/apiserver.log" &
pids+=($!)
first_line "$work/apiserver.out" >/dev/null
export KUBECONFIG=$work/kubeconfig

kubectl create namespace kube-system >/dev/null 2>&1 || true
# The vSphere CSI driver's namespace: with no driver installed volmig holds the driver
# syncer's Lease there itself (own mode), and registers only while it holds it.
kubectl create namespace vmware-system-csi >/dev/null 2>&1 || true
kubectl apply -f "$root/crds/volumemigrations.yaml" >/dev/null
# The vSphere CSI driver's cache CRD, as the driver installs it: volmig publishes into it.
kubectl apply -f "$root/charts/volmig/files/cnsvspherevolumemigrations.yaml" >/dev/null
echo "== applying in-tree PVs: pv-a and pv-b share one vmdk, pv-bad is malformed, pv-missing has no vmdk"
pv() {
  cat <<YAML
---
apiVersion: v1
kind: PersistentVolume
metadata:
  name: $1
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  vsphereVolume:
    volumePath: "$2"
    fsType: ext4
YAML
}
{
  pv pv-a "[$datastore] kubevols/disk-0001.vmdk"
  pv pv-b "[/DC0/datastore/$datastore] kubevols//disk-0001.vmdk"
  pv pv-c "[$datastore] kubevols/disk-0002.vmdk"
  pv pv-bad "kubevols/disk-0003.vmdk"
  pv pv-missing "[$datastore] kubevols/does-not-exist.vmdk"
} >"$work/pvs.yaml"
kubectl apply -f "$work/pvs.yaml"

printf 'username: demo@vsphere.local\npassword: demo-Passw0rd\n' >"$work/credentials"
http_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
echo "== running volmig"
"$volmig" run --kubeconfig "$work/kubeconfig" --vc-url "$vc_url" --vc-ca-file "$work/vc-ca.pem" \
  --vc-credentials-file "$work/credentials" --cluster-id demo-cluster \
  --http-addr "127.0.0.1:$http_port" --probe-addr 127.0.0.1:0 --full-sync-interval 30s >"$work/volmig.out" 2>"$work/volmig.log" &
pids+=($!)

echo "== waiting for convergence"
expected=3 # three valid paths: disk-0001, disk-0002, does-not-exist
for i in $(seq 1 120); do
  done_count=$(kubectl get volumemigrations -o json | python3 -c '
import json,sys
items=json.load(sys.stdin)["items"]
print(sum(1 for i in items if (i.get("status") or {}).get("phase") in ("Registered","Failed")))')
  [ "$done_count" -ge "$expected" ] && break
  [ "$i" = 120 ] && { echo "volmig did not converge; log:"; tail -n 30 "$work/volmig.log"; exit 1; }
  sleep 0.5
done

echo
kubectl get volumemigrations
echo
for _ in $(seq 1 50); do
  [ "$(kubectl get cnsvspherevolumemigrations -o name | wc -l)" -ge 3 ] && break
  sleep 0.2
done
echo "== who registers: the CSI driver syncer's Lease, held by volmig (no driver is installed)"
kubectl -n vmware-system-csi get lease vsphere-syncer -o custom-columns=LEASE:.metadata.name,HOLDER:.spec.holderIdentity
echo
echo "== the vSphere CSI driver's cache (CnsVSphereVolumeMigration objects volmig published)"
kubectl get cnsvspherevolumemigrations \
  -o custom-columns=NAME:.metadata.name,VOLUMEPATH:.spec.volumepath,VOLUMEID:.spec.volumeid,PROTECTED:.spec.protectvolumefromvmdelete
echo
python3 - "$vc_admin" <<'PY'
import json, ssl, sys, urllib.request
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
vols = json.load(urllib.request.urlopen(sys.argv[1] + "/cns/volumes", context=ctx))
paths = [v.get("backingPath") for v in vols]
print(f"CNS volumes: {len(vols)} for {len(set(paths))} vmdks, duplicates: {len(paths) - len(set(paths))}")
PY
kubectl get events -A --field-selector reason=InvalidVolumePath -o custom-columns=OBJECT:.involvedObject.name,REASON:.reason,MESSAGE:.message 2>/dev/null \
  || kubectl get events -A | grep -i invalid || true

echo
echo "== preflight: volmig check (the same flags as volmig run; read-only)"
"$volmig" check --kubeconfig "$work/kubeconfig" --vc-url "$vc_url" --vc-ca-file "$work/vc-ca.pem" \
  --vc-credentials-file "$work/credentials" --cluster-id demo-cluster \
  --vc-request-timeout 20s

if [ "${DEMO_KEEP:-0}" = 1 ]; then
  cat <<MSG

Left running (DEMO_KEEP=1):
  export KUBECONFIG=$work/kubeconfig
  kubectl get vmig            # the mapping
  curl -s http://127.0.0.1:$http_port/metrics
  $volmig lookup --kubeconfig $work/kubeconfig "[$datastore] kubevols/disk-0001.vmdk"
  logs: $work/*.log       stop: kill ${pids[*]}
MSG
fi
