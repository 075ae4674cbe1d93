#!/usr/bin/env bash
# Writes volmig's container image as an OCI image layout, without a container engine
# (`make image`; docs/operations.md, "The container image"):
#
#   scripts/oci-image.sh BINARY LAYOUT_DIR TAG
#
# The image holds BINARY as /usr/local/bin/volmig, the shared libraries it links (as
# `ldd` resolves them on this machine: the Dockerfile's musl build needs none), the CA
# certificates of this machine, /etc/passwd and /etc/group with the user `nonroot`
# (65532:65532, as distroless) and an empty /tmp. It runs as 65532:65532 with
# ENTRYPOINT /usr/local/bin/volmig and CMD --help, like the Dockerfile's image.
# umoci (Debian package `umoci`) writes the layout; `skopeo inspect oci:LAYOUT_DIR:TAG`
# and `umoci stat --image LAYOUT_DIR:TAG` read it. Idempotent: LAYOUT_DIR is replaced.
set -euo pipefail

if [[ $# -ne 3 ]]; then
    echo "usage: $0 BINARY LAYOUT_DIR TAG" >&2
    exit 2
fi
binary=$1
layout=$2
tag=$3
[[ -x $binary ]] || { echo "$binary: not an executable" >&2; exit 1; }
command -v umoci >/dev/null || { echo "umoci is required (make image installs it)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rootfs=$work/rootfs

install -D -m 0755 "$binary" "$rootfs/usr/local/bin/volmig"
# The dynamic loader and libraries, at the paths the binary names them by.
while read -r lib; do
    [[ -n $lib ]] || continue
    install -D -m 0755 "$(readlink -f "$lib")" "$rootfs$lib"
done < <(ldd "$binary" 2>/dev/null | grep -o '/[^ ]*' | sort -u || true)
if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then
    install -D -m 0644 /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"
fi
install -d -m 1777 "$rootfs/tmp"
install -d -m 0755 "$rootfs/home/nonroot"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' \
    > "$rootfs/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' > "$rootfs/etc/group"
chmod 0644 "$rootfs/etc/passwd" "$rootfs/etc/group"

rm -rf "$layout"
umoci init --layout "$layout"
umoci new --image "$layout:$tag"
# umoci unpacks into a bundle (config.json + rootfs/); the files go into its rootfs.
umoci unpack --rootless --image "$layout:$tag" "$work/bundle"
cp -a "$rootfs/." "$work/bundle/rootfs/"
umoci repack --image "$layout:$tag" "$work/bundle"
umoci config --image "$layout:$tag" \
    --os linux --architecture amd64 \
    --config.user 65532:65532 \
    --config.entrypoint /usr/local/bin/volmig \
    --config.cmd --help \
    --config.exposedports 8080/tcp \
    --config.workingdir / \
    --config.env PATH=/usr/local/bin:/usr/bin:/bin
umoci gc --layout "$layout"
echo "wrote the OCI image layout $layout (tag $tag)"
