# shellcheck shell=bash
# busybox_rootfs DIR: a root filesystem of the host's busybox (Debian's
# busybox-static) with a symlink per applet in /bin, a world-writable /tmp
# and root and nobody in /etc/passwd. The busybox:stable image of
# scripts/cluster/build-images is this, and scripts/e2e-image builds the
# examples' tool image on it. Sourced, not run.
busybox_rootfs() {
  local r="$1" a
  mkdir -p "$r/bin" "$r/tmp" "$r/etc" "$r/root" "$r/var" "$r/usr/bin" "$r/sbin" "$r/usr/sbin"
  chmod 1777 "$r/tmp"
  cp /bin/busybox "$r/bin/busybox"
  for a in $(/bin/busybox --list); do
    [ "$a" = busybox ] || ln -sf busybox "$r/bin/$a"
  done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' > "$r/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' > "$r/etc/group"
}
