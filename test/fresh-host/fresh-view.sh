#!/usr/bin/env bash
# Runs a command on a fresh host view: in a private mount namespace where
# everything vkvm, libvirt or the tests make at run time is absent, as on a
# machine where deploy/setup.sh has just run and nothing else ever has. A
# used machine (CI's, a developer's) keeps such things from earlier runs, and
# they hide defects: a directory vkvm forgot to create passes when an earlier
# run left it. Absent means absent, not empty: each path's parent is remade
# on a tmpfs with its other entries bound back, so the path does not exist.
# What set-up and the tests build and cache by hash (the control plane, the
# test guest, virtctl, the VNC test client) stays, read-write, so a run does
# not rebuild them. A fresh, empty /tmp too. What the command makes in the
# run-time paths, or in /tmp, goes with the view when it ends; the rest of
# the host it changes as any command would.
#
#   bash test/fresh-host/fresh-view.sh COMMAND [ARG...]
set -euo pipefail

if [ "${1:-}" = "--inside" ]; then
  shift
else
  [ "$(id -u)" -eq 0 ] || { echo "fresh-view: run as root" >&2; exit 1; }
  [ $# -gt 0 ] || { echo "usage: fresh-view.sh COMMAND [ARG...]" >&2; exit 2; }
  # The fresh /tmp lives on disk (VM disks and builds are large), under a name the host's /tmp never shows.
  scratch=$(mktemp -d /var/tmp/vkvm-fresh-tmp.XXXXXX)
  # The build caches are made on the host, so what the run builds into them outlives the view.
  for k in cluster guest virtctl test-tools; do mkdir -p "/var/cache/vkvm/$k"; done
  trap 'rm -rf "$scratch"' EXIT
  # --propagation private: nothing mounted here reaches the host, and the host's later mounts do not appear.
  status=0
  FRESH_VIEW_TMP=$scratch unshare --mount --propagation private -- "$BASH" "$0" --inside "$@" || status=$?
  exit "$status"
fi

# Run-time paths: made by vkvm (state, run and cache dirs, the libvirt
# cache, the root of each VM's view), by libvirt or ip (netns) at run time.
RUNTIME_PATHS=(/var/lib/vkvm /run/vkvm /run/libvirt /run/netns /var/cache/libvirt)
# In vkvm's cache dir only the build caches stay; downloaded images, libvirt's cache and anything new go.
VKVM_CACHE=/var/cache/vkvm
VKVM_BUILD_CACHES=(cluster guest virtctl test-tools) # as made above
# libvirt's directories keep what its packages installed; what a daemon or vkvm made in them goes.
PACKAGED_DIRS=(/var/lib/libvirt /var/log/libvirt /etc/libvirt)

log() { printf 'fresh-view: %s\n' "$*" >&2; }
packaged() { dpkg-query -S "$1" >/dev/null 2>&1; }

# Their parents are remade even where they are missing, so what the command makes there goes with the view.
hidden=("${RUNTIME_PATHS[@]}")
if [ -d "$VKVM_CACHE" ]; then
  for e in "$VKVM_CACHE"/* "$VKVM_CACHE"/.[!.]*; do
    [ -e "$e" ] || [ -L "$e" ] || continue
    keep=false
    for k in "${VKVM_BUILD_CACHES[@]}"; do [ "${e##*/}" = "$k" ] && keep=true; done
    $keep || hidden+=("$e")
  done
fi
for d in "${PACKAGED_DIRS[@]}"; do
  [ -e "$d" ] || continue
  if ! packaged "$d"; then
    hidden+=("$d")
    continue
  fi
  while IFS= read -r -d '' e; do packaged "$e" || hidden+=("$e"); done < <(find "$d" -mindepth 1 -maxdepth 1 -print0)
done

# Remakes directory $1 on a tmpfs of its mode and owner, every entry but the names in $2.. bound back
# (with what is mounted below them); symlinks are copied.
remake_without() {
  local dir=$1
  shift
  local stage
  # Never inside a directory being remade: the fresh /tmp's backing directory is in none.
  stage=$(mktemp -d "$FRESH_VIEW_TMP/stage.XXXXXX")
  mount --rbind "$dir" "$stage"
  mount -t tmpfs -o "mode=$(stat -c %a "$dir"),uid=$(stat -c %u "$dir"),gid=$(stat -c %g "$dir")" fresh-view "$dir"
  local e name skip h
  for e in "$stage"/* "$stage"/.[!.]*; do
    [ -e "$e" ] || [ -L "$e" ] || continue
    name=${e##*/}
    skip=false
    for h in "$@"; do [ "$name" = "$h" ] && skip=true; done
    $skip && continue
    if [ -L "$e" ]; then
      ln -s "$(readlink "$e")" "$dir/$name"
    elif [ -d "$e" ]; then
      mkdir -p "$dir/$name"
      mount --rbind "$e" "$dir/$name"
    else
      [ -e "$dir/$name" ] || touch "$dir/$name"
      mount --bind "$e" "$dir/$name"
    fi
  done
  umount -l "$stage"
  rmdir "$stage"
}

# Parents shallowest first: a deeper parent is then remade inside the view its parent already has.
mapfile -t parents < <(for p in "${hidden[@]}"; do dirname "$p"; done | sort -u | awk '{ print gsub("/", "/"), $0 }' | sort -n | cut -d' ' -f2-)
for parent in "${parents[@]}"; do
  names=()
  for p in "${hidden[@]}"; do [ "$(dirname "$p")" = "$parent" ] && names+=("${p##*/}"); done
  log "absent: ${names[*]/#/$parent/}"
  remake_without "$parent" "${names[@]}"
done

chmod 1777 "$FRESH_VIEW_TMP"
mount --bind "$FRESH_VIEW_TMP" /tmp
unset FRESH_VIEW_TMP
exec "$@"
