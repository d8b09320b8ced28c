#!/usr/bin/env bash
# Idempotent host set-up for vkvm: system packages, the libvirt-qemu user,
# npm dependencies, the TypeScript build, the test control plane binaries (with the kubelet and CoreDNS) and csi-sanity.
# Safe to re-run; each step does nothing when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '%s setup: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

if [ "$(id -u)" -ne 0 ]; then
  echo "setup: vkvm runs as root (like a kubelet); re-run as root" >&2
  exit 1
fi

packages=(
  qemu-system-x86 qemu-utils qemu-guest-agent
  qemu-block-extra  # qemu-img's curl driver: the import bench's yardstick converts straight from the http URL
  libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients libvirt-dev
  linux-image-amd64 busybox-static dropbear-bin netcat-traditional  # the test guest: kernel, userland, SSH server, UDP echo
  genisoimage libxml2-utils jq iproute2 iptables nftables dnsmasq-base dnsmasq-utils
  pkg-config make g++ python3 cpio
  python3-venv  # the tests' VNC client (vncdotool from PyPI) lives in a virtualenv
  systemd openssl  # systemd-analyze verifies deploy/vkvm.service; openssl checks the CA hash in tests
  zstd  # zstd-compressed image layers
  docker-registry apache2-utils skopeo  # the tests' real OCI registry, its htpasswd (bcrypt) files, and OCI layouts
  syslinux syslinux-common systemd-boot-efi dosfstools mtools  # the test guest's bootable disk (BIOS and UEFI boot loaders, its FAT partition)
  ovmf  # UEFI firmware for firmware.bootloader.efi
  containerd runc containernetworking-plugins  # container nodes (vkvm up --container-nodes): runtime and CNI plugins
  xfsprogs  # vkvm csi: XFS, where volume clones and snapshots are copy-on-write (its tests make one); losetup and e2fsprogs are essential
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing Debian packages: ${missing[*]}"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  log "Debian packages present"
fi

# The package enables a registry on :5000; the tests start their own on free loopback ports.
if [ -d /run/systemd/system ] && systemctl is-enabled --quiet docker-registry 2>/dev/null; then
  log "disabling the packaged docker-registry service"
  systemctl disable --now docker-registry
fi

# Each container node runs its own containerd in its own network namespace; a host-wide one would be a second,
# unmanaged runtime on the machine.
if [ -d /run/systemd/system ] && systemctl is-enabled --quiet containerd 2>/dev/null; then
  log "disabling the packaged containerd service"
  systemctl disable --now containerd
fi

# Debian 12's libvirt runs QEMU as libvirt-qemu; the package creates the user
# only through libvirt-daemon-system, which vkvm does not need.
getent group kvm >/dev/null || groupadd -r kvm
getent group libvirt-qemu >/dev/null || groupadd -r libvirt-qemu
if ! getent passwd libvirt-qemu >/dev/null; then
  log "creating user libvirt-qemu"
  useradd -r -g libvirt-qemu -G kvm -d /var/lib/libvirt -s /usr/sbin/nologin libvirt-qemu
fi

if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  log "installing npm dependencies"
  npm ci --no-fund --no-audit
else
  log "npm dependencies present"
fi
log "building TypeScript"
npm run --silent build

log "building the test control plane (cached by source hash)"
node dist/provider/cli/main.js cluster build
log "building csi-sanity, the CSI driver tests' judge (cached by version)"
node dist/test/helpers/csi-sanity.js >/dev/null
log "done"
