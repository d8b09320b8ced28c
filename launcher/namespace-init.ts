// The shell script that is PID 1 of a VM's libvirt namespaces (libvirtd.ts
// starts it under unshare): it builds the filesystem view
// (filesystem-view.ts), pivots into it and runs libvirtd.

/** libvirt's private directories, bound over these paths in the view (their host dirs: <dir>/<name>). */
export const MOUNTS = [
  { name: 'run', target: '/run/libvirt' },
  { name: 'lib', target: '/var/lib/libvirt' },
  { name: 'log', target: '/var/log/libvirt' },
  { name: 'etc', target: '/etc/libvirt' },
] as const;
export const CACHE_TARGET = '/var/cache/libvirt';

// PID 1 of the namespace. "$1".."$4" are the private dirs in MOUNTS order,
// "$5" the node's libvirt cache directory; "$6" is the libvirtd binary, "$7"
// the CPU it is pinned to, "$8" the namespace's hostname (empty: the host's),
// "$9" QEMU's uid:gid (the owner of the device nodes the view makes); the rest is the
// filesystem view (filesystem-view.ts), `op:path` entries, parents first. Its
// default pid file, /run/libvirtd.pid, is host-wide and locked: a second
// daemon would refuse to start. `wait` reaps every child (QEMU included) and
// returns when libvirtd exits, which ends the namespace.
//
// The view is a new root: a tmpfs (mounted on /run/libvirt, which exists on
// every libvirt host) where each entry is mounted at its host path (/proc a
// new procfs: this is the new PID namespace's PID 1), symlinks
// (merged /usr's /bin, /etc/localtime) copied last so nothing is made through
// one out of the new root; then the root and the hiding tmpfs made read-only,
// and pivot_root into it (the host's root stacked on top of it, and
// detached). Paths are used as given (--no-canonicalize), never resolved
// through what the view has already covered.
//
// A handful of processes, not one per mount (#29: ~25 mount/mkdir commands
// cost ~100 CPU-ms per start): shell builtins sort the entries into two
// fstab files, written to the launcher's libvirt directory, and one
// `mount --all` mounts each in order: first the directories, each target
// made once its parents are mounted (X-mount.mkdir); then, after one mkdir
// and one touch for the files' targets, the files and libvirt's private
// directories. `bind,ro` is a bind and a read-only remount, as before.
//
// Why pin libvirtd: libvirt keys its shared QEMU capabilities cache on the
// CPUID of the CPU the daemon happens to run on. Where CPUs report different
// CPUID (measured on these hosts), a daemon on another CPU than the one that
// wrote the cache re-probes QEMU (~1.3 s per VM start). Every launcher pins
// its daemon to the same CPU, so the cache stays valid. QEMU is not affected:
// libvirt sets its affinity to all host CPUs when the domain names none.
export const NAMESPACE_INIT_SCRIPT = `set -e
run=$1 lib=$2 log=$3 etc=$4 cache=$5 libvirtd=$6 cpu=$7 hostname=$8 owner=$9
shift 9
[ -z "$hostname" ] || echo "$hostname" > /proc/sys/kernel/hostname
root=${MOUNTS[0].target}
fstab=\${run%/*}/view.fstab
sp=' ' tab='\t' bs='\\' nl='
'
# $f: "$1" as an fstab(5) field, its space, tab, newline and backslash octal escapes.
field() {
  case $1 in *"$sp"* | *"$tab"* | *"$nl"* | *"$bs"*) ;; *) f=$1 && return ;; esac
  f= s=$1
  while [ -n "$s" ]; do
    c=\${s%"\${s#?}"} s=\${s#?}
    case $c in "$sp") c='\\040' ;; "$tab") c='\\011' ;; "$nl") c='\\012' ;; "$bs") c='\\134' ;; esac
    f=$f$c
  done
}
# Adds "source <target in the view> type options" to the next fstab.
line() { field "$1" && l=$f && field "$root$2" && lines="$lines$l $f $3 $4 0 0$nl"; }
mount_lines() { (umask 077 && printf '%s' "$lines" > "$fstab") && mount --no-canonicalize --all --fstab "$fstab" && lines=; }
keep_opts() { case $1 in keep-ro:*) o=bind,ro ;; *) o=bind ;; esac; }
mount -t tmpfs -o mode=0755,size=1m vkvm-root $root
lines=
for e in "$@"; do
  p=\${e#*:}
  case $e in
    keep-*) if [ ! -L "$p" ] && [ -d "$p" ]; then keep_opts "$e" && line "$p" "$p" none $o,X-mount.mkdir; fi ;;
    rbind:*) line "$p" "$p" none rbind,X-mount.mkdir ;;
    proc:*) line proc "$p" proc X-mount.mkdir ;;
    tmpfs:*) line vkvm-tmp "$p" tmpfs mode=1777,size=64m,X-mount.mkdir ;;
    hide:*) line vkvm-hidden "$p" tmpfs mode=0755,size=64k ;;
  esac
done
mount_lines
# Targets for the files to bind (where no bound directory has them already): one mkdir, one touch.
parents() { for t; do shift && set -- "$@" "\${t%/*}"; done && mkdir -p "$@"; }
file_targets() {
  for e; do
    shift
    p=\${e#*:}
    case $e in keep-*) if [ ! -L "$p" ] && [ ! -d "$p" ] && [ ! -e "$root$p" ]; then set -- "$@" "$root$p"; fi ;; esac
  done
  if [ $# -gt 0 ]; then parents "$@" && touch "$@"; fi
}
file_targets "$@"
for e in "$@"; do
  p=\${e#*:}
  t=$root$p
  case $e in
    keep-*) if [ ! -L "$p" ] && [ ! -d "$p" ]; then keep_opts "$e" && line "$p" "$p" none $o; fi ;;
    device-*)
      [ -b "$p" ] || { echo "$p is not a block device" >&2; exit 1; }
      mkdir -p "\${t%/*}"
      mode=0600; case $e in device-ro:*) mode=0400;; esac
      mknod -m $mode "$t" b "0x$(stat -c %t "$p")" "0x$(stat -c %T "$p")"
      chown "$owner" "$t";;
  esac
done
line "$run" ${MOUNTS[0].target} none bind,X-mount.mkdir
line "$lib" ${MOUNTS[1].target} none bind,X-mount.mkdir
line "$log" ${MOUNTS[2].target} none bind,X-mount.mkdir
line "$etc" ${MOUNTS[3].target} none bind,X-mount.mkdir
line "$cache" ${CACHE_TARGET} none bind,X-mount.mkdir
mount_lines
# The symlinks, as they are (one cp), last: nothing is made through them.
symlinks() {
  for e; do
    shift
    p=\${e#*:}
    case $e in keep-*) if [ -L "$p" ]; then set -- "$@" "$p"; fi ;; esac
  done
  if [ $# -gt 0 ]; then cp -P --parents "$@" "$root/"; fi
}
symlinks "$@"
for e in "$@"; do
  case $e in hide:*) mount --no-canonicalize -o remount,ro "$root\${e#hide:}";; esac
done
mount --no-canonicalize -o remount,ro $root
cd $root
pivot_root . .
umount -l .
cd /
taskset -c "$cpu" "$libvirtd" --config ${MOUNTS[3].target}/libvirtd.conf --pid-file ${MOUNTS[0].target}/libvirtd.pid &
wait "$!"
`;
