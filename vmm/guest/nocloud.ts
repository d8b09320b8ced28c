// The test guest's cloud-init: the NoCloud datasource as cloud-init reads it
// (a volume labelled cidata or CIDATA, ISO 9660 or vfat, holding user-data,
// meta-data and network-config), acted on by busybox shell and awk. Enough
// of cloud-init for tests to prove a seed reached the guest and was used:
// meta-data's local-hostname, a user-data shell script, or #cloud-config's
// hostname, fqdn, bootcmd and runcmd; other keys are named on the console as
// ignored. It runs on every boot: the guest's root is its initramfs, so
// nothing remembers an instance-id from a boot before.

/**
 * Kernel modules the seed may need (dependencies resolved by the recipe): a
 * SATA CD-ROM or disk (vkvm's pods and KubeVirt's cdrom default), a
 * virtio-scsi disk, and the two filesystems NoCloud allows. virtio_blk is
 * loaded at boot already.
 */
export const NOCLOUD_MODULES = ['ahci', 'sr_mod', 'sd_mod', 'virtio_scsi', 'isofs', 'vfat', 'nls_cp437', 'nls_ascii'];

/** What the guest prints when cloud-init is done, as cloud-init's final message begins. */
export const CLOUD_INIT_FINISHED = 'Cloud-init v. vkvm-guest finished at';

/** Turns #cloud-config (a YAML subset) into runcmd.sh and bootcmd.sh, printing `hostname <name>` and `ignored <key>` lines. */
const CLOUD_CONFIG_AWK = String.raw`
function unquote(s) {
  if (s ~ /^".*"$/) { s = substr(s, 2, length(s) - 2); gsub(/\\"/, "\"", s); gsub(/\\\\/, "\\", s); return s }
  if (s ~ /^'.*'$/) { s = substr(s, 2, length(s) - 2); gsub(/''/, "'", s); return s }
  sub(/[ \t]+#.*$/, "", s)
  return s
}
function shq(s) { gsub(/'/, "'\"'\"'", s); return "'" s "'" }
# A flow list [a, "b c"] is an argv, each element quoted for the shell (split at commas: no element may hold one).
function argv(s,   n, i, parts, out) {
  s = substr(s, 2, length(s) - 2)
  n = split(s, parts, /[ \t]*,[ \t]*/)
  out = ""
  for (i = 1; i <= n; i++) {
    sub(/^[ \t]+/, "", parts[i]); sub(/[ \t]+$/, "", parts[i])
    out = out (i > 1 ? " " : "") shq(unquote(parts[i]))
  }
  return out
}
/^[ \t]*#/ || /^[ \t]*$/ { next }
/^[A-Za-z_][A-Za-z0-9_-]*:/ {
  key = $0; sub(/:.*/, "", key)
  val = $0; sub(/^[^:]*:[ \t]*/, "", val)
  if (key == "hostname" || key == "fqdn") { if (val != "") print key " " unquote(val); next }
  if (key != "runcmd" && key != "bootcmd") print "ignored " key
  next
}
/^[ \t]*- / && (key == "runcmd" || key == "bootcmd") {
  item = $0; sub(/^[ \t]*- [ \t]*/, "", item)
  if (item == "|" || item == ">" || item ~ /^[|>][-+]/) { print "ignored " key " block scalar"; next }
  print (item ~ /^\[.*\]$/ ? argv(item) : unquote(item)) > (dir "/" key ".sh")
}
`;

const NOCLOUD_SCRIPT = String.raw`#!/bin/sh
# vkvm-nocloud: the test guest's cloud-init, NoCloud only (vmm/guest/nocloud.ts).
say() { echo "vkvm-guest: cloud-init: $*" >/dev/ttyS0; }
run=/run/cloud-init
seed=$run/seed
out=/var/log/cloud-init-output.log
mkdir -p $seed
chmod 700 $run
for m in @MODULES@; do insmod /lib/modules/$m.ko 2>/dev/null; done

# The seed's disk may appear a while after boot (SATA ports are probed late
# under TCG): look again whenever the block devices change, for 15 s.
dev=
seen=
i=0
while [ $i -lt 75 ]; do
  now=$(ls /sys/class/block)
  if [ "$now" != "$seen" ]; then
    seen=$now
    dev=$(findfs LABEL=cidata 2>/dev/null || findfs LABEL=CIDATA 2>/dev/null)
    [ -n "$dev" ] && break
  fi
  usleep 200000
  i=$((i+1))
done
if [ -z "$dev" ]; then
  # Not on the console: most VMs have no seed, and tests read the console line by line.
  echo "vkvm-guest: cloud-init: no NoCloud seed (no volume labelled cidata)" >>/var/log/cloud-init.log
  exit 0
fi
if ! mount -o ro "$dev" $seed; then
  say "cannot mount the seed $dev"
  exit 1
fi
for f in user-data meta-data network-config vendor-data; do
  [ -f $seed/$f ] && cp $seed/$f $run/$f
done
umount $seed
errors=

meta() { /bin/vkvm-meta-data "$1" $run/meta-data 2>/dev/null; }
iid=$(meta instance-id)
[ -n "$iid" ] && echo "$iid" >$run/.instance-id
host=$(meta local-hostname)
[ -f $run/network-config ] && say "network-config read; eth0 takes its address by DHCP"

first=$(head -n 1 $run/user-data 2>/dev/null)
case "$first" in
  '#!'*)
    [ -n "$host" ] && hostname "$host"
    cp $run/user-data $run/user-data.sh
    chmod 700 $run/user-data.sh
    if ! $run/user-data.sh >>$out 2>&1; then errors="user-data script failed"; fi
    cat $out >/dev/ttyS0
    ;;
  '#cloud-config'*)
    awk -v dir=$run -f /etc/vkvm-cloud-config.awk $run/user-data >$run/cloud-config.out
    [ -f $run/bootcmd.sh ] && { sh $run/bootcmd.sh >>$out 2>&1 || errors="bootcmd failed"; }
    name=$(sed -n 's/^hostname //p' $run/cloud-config.out | head -n 1)
    [ -n "$name" ] || name=$(sed -n 's/^fqdn //p' $run/cloud-config.out | head -n 1)
    [ -n "$name" ] || name=$host
    [ -n "$name" ] && hostname "$name"
    ignored=$(sed -n 's/^ignored //p' $run/cloud-config.out | tr '\n' ',' | sed 's/,$//; s/,/, /g')
    [ -n "$ignored" ] && say "#cloud-config keys the test guest ignores: $ignored"
    [ -f $run/runcmd.sh ] && { sh $run/runcmd.sh >>$out 2>&1 || errors="runcmd failed"; }
    [ -f $out ] && cat $out >/dev/ttyS0
    ;;
  '')
    [ -n "$host" ] && hostname "$host"
    ;;
  *)
    [ -n "$host" ] && hostname "$host"
    errors="user-data format not supported by the test guest: $first"
    ;;
esac
[ -n "$errors" ] && say "$errors"
hostname >/etc/hostname
ds="DataSourceNoCloud [seed=$dev][dsmode=net]"
if [ -n "$errors" ]; then
  printf '{"v1": {"datasource": "%s", "errors": ["%s"]}}\n' "$ds" "$(echo "$errors" | sed 's/["\\]/\\&/g')" >$run/result.json
else
  printf '{"v1": {"datasource": "%s", "errors": []}}\n' "$ds" >$run/result.json
fi
echo "@FINISHED@ $(date -R). Datasource $ds.  Up $(cut -d' ' -f1 /proc/uptime) seconds" >/dev/ttyS0
`;

/** Prints one top-level key of meta-data, YAML (key: value) or JSON (as KubeVirt writes it), unquoted. */
const META_DATA_SCRIPT = String.raw`#!/bin/sh
# vkvm-meta-data KEY FILE (vmm/guest/nocloud.ts)
tr ',{}' '\n\n\n' <"$2" | sed -n "s/^[[:space:]]*[\"']\{0,1\}$1[\"']\{0,1\}[[:space:]]*:[[:space:]]*//p" | head -n 1 | sed "s/^[\"']//; s/[\"'[:space:]]*$//"
`;

/** The guest files of the NoCloud step, keyed by guest path; `modules` in load order. */
export function renderNoCloudFiles(modules: readonly string[]): Map<string, string> {
  return new Map([
    ['/bin/vkvm-nocloud', NOCLOUD_SCRIPT.replace('@MODULES@', modules.join(' ')).replace('@FINISHED@', CLOUD_INIT_FINISHED)],
    ['/bin/vkvm-meta-data', META_DATA_SCRIPT],
    ['/etc/vkvm-cloud-config.awk', CLOUD_CONFIG_AWK.trimStart()],
  ]);
}
