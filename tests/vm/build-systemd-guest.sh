#!/usr/bin/env bash
# A Debian guest whose PID 1 is systemd, for the tests that install the driveprobe package
# under a real systemd (tests/vm/systemd.rs, through tests/vm/systemd_guest.rs).
#
#   build-systemd-guest.sh
#       Makes sure the cached guest is built, and prints
#         rootfs=PATH      an ext4 image (root filesystem; boot it with snapshot=on)
#         kernel=PATH      the guest's own kernel (linux-image-amd64)
#         initrd=PATH      the guest's own initramfs (initramfs-tools, built in the guest)
#         built=SECONDS    how long this call spent building (0: the cache was current)
#
# Everything comes from Debian packages: mmdebstrap lays out a bookworm root filesystem
# from the mirrors of the host's own apt sources, and the kernel and initramfs are taken
# from it. The result is kept in $DRIVEPROBE_VM_CACHE/systemd-guest (default
# target/vm-cache) with a stamp, the hash of this script (which holds the package list,
# the guest's settings and its agent); it is rebuilt when the hash changes. Concurrent
# callers wait for one builder (flock). Needs root (mmdebstrap's root mode, chroot),
# mmdebstrap and e2fsprogs (mkfs.ext4 -d). Nothing here touches a block device of the host:
# the image is a sparse file.
#
# The guest:
#  - systemd as PID 1, udev, dbus, systemd-networkd with a static address for QEMU's user
#    network (10.0.2.15/24), so that a port forward reaches the guest's services;
#  - smartmontools and nvme-cli (what the driveprobe package recommends), apt;
#  - dp-agent.service: runs the host's shell scripts, one at a time, and writes the files
#    it sends, from the virtio-serial port org.driveprobe.agent (protocol below);
#  - units that only cost boot time under TCG masked (timers, getty, e2scrub).
#
# Agent protocol, one line each way, over the port:
#   guest: READY                      when the agent (re)opens the port
#   host:  RUN ID BASE64(SCRIPT)      run SCRIPT with bash, stdin /dev/null
#   host:  PUT ID SIZE PATH, then SIZE bytes: write them to PATH (no spaces in PATH)
#   guest: END ID RC BASE64(OUTPUT)   the exit status, and stdout+stderr of a RUN
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
CACHE=${DRIVEPROBE_VM_CACHE:-$REPO/target/vm-cache}/systemd-guest
SUITE=bookworm
# The guest's packages (besides the minbase variant's required ones). procps: /bin/kill, as on
# any Debian install (priority important), for units that signal with it. dmsetup: a
# device the test suspends (a drive that does not answer).
PKGS=systemd-sysv,udev,dbus,kmod,iproute2,procps,linux-image-amd64,initramfs-tools,smartmontools,nvme-cli,dmsetup

die() { echo "build-systemd-guest.sh: $*" >&2; exit 1; }

for c in mmdebstrap mkfs.ext4 flock sha256sum systemctl; do
    command -v "$c" >/dev/null 2>&1 ||
        die "missing '$c': apt-get install mmdebstrap e2fsprogs util-linux systemd (scripts/test does)"
done
[ "$(id -u)" -eq 0 ] || die "needs root (mmdebstrap builds the root filesystem in a chroot)"

want=$(sha256sum "$0" | cut -d' ' -f1)
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9

print() {
    echo "rootfs=$CACHE/rootfs.img"
    echo "kernel=$CACHE/vmlinuz"
    echo "initrd=$CACHE/initrd.img"
    echo "built=$1"
}

if [ -f "$CACHE/stamp" ] && [ "$(cat "$CACHE/stamp")" = "$want" ] &&
    [ -f "$CACHE/rootfs.img" ] && [ -f "$CACHE/vmlinuz" ] && [ -f "$CACHE/initrd.img" ]; then
    print 0
    exit 0
fi

start=$(date +%s)
rm -f "$CACHE/stamp"
W=$(mktemp -d "$CACHE/build.XXXXXX")
trap 'rm -rf "$W"' EXIT
SOURCES=/etc/apt/sources.list.d/debian.sources
[ -f "$SOURCES" ] || SOURCES=/etc/apt/sources.list
[ -f "$SOURCES" ] || die "no apt sources on this host to use as the guest's mirror"

# The initramfs: only the modules that find the root (virtio disk, ext4), so that it is
# small (unpacked by an emulated CPU at every boot). Written before the kernel package is
# installed (the essential hook runs between the required packages and the rest).
mkdir -p "$W/hooks"
cat >"$W/hooks/initramfs.sh" <<'EOF'
#!/bin/sh
set -e
mkdir -p "$1/etc/initramfs-tools/conf.d"
echo MODULES=list >"$1/etc/initramfs-tools/conf.d/driveprobe-guest.conf"
echo COMPRESS=gzip >>"$1/etc/initramfs-tools/conf.d/driveprobe-guest.conf"
printf '%s\n' virtio_pci virtio_blk ext4 >"$1/etc/initramfs-tools/modules"
EOF
chmod 0755 "$W/hooks/initramfs.sh"

mmdebstrap --quiet --variant=minbase --include="$PKGS" \
    --essential-hook="$W/hooks/initramfs.sh" \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    "$SUITE" "$W/rootfs.tar" "$SOURCES" >&2
R=$W/root
mkdir -p "$R"
tar -C "$R" -xf "$W/rootfs.tar"
rm -f "$W/rootfs.tar"
cp "$R"/boot/vmlinuz-* "$W/vmlinuz"
cp "$R"/boot/initrd.img-* "$W/initrd.img"

echo driveprobe-guest >"$R/etc/hostname"
# The root filesystem; the other disks are the tests' own.
echo 'LABEL=dpguest-root / ext4 rw,errors=remount-ro 0 1' >"$R/etc/fstab"

# QEMU's user network: the guest is 10.0.2.15, QEMU's host side 10.0.2.2.
mkdir -p "$R/etc/systemd/network"
cat >"$R/etc/systemd/network/10-qemu.network" <<'EOF'
[Match]
Type=ether
[Network]
Address=10.0.2.15/24
Gateway=10.0.2.2
LinkLocalAddressing=no
IPv6AcceptRA=no
EOF

# Slow or useless under TCG, with nobody at a console.
for u in getty@tty1.service serial-getty@ttyS0.service e2scrub_reap.service \
    e2scrub_all.timer apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer \
    fstrim.timer systemd-timesyncd.service man-db.timer; do
    ln -sf /dev/null "$R/etc/systemd/system/$u"
done

install -m 0755 /dev/stdin "$R/usr/local/sbin/dp-agent" <<'EOF'
#!/bin/bash
# Runs the host's scripts and takes its files from the virtio-serial port
# (tests/vm/build-systemd-guest.sh).
port=/dev/virtio-ports/org.driveprobe.agent
mkdir -p /run/dp-agent
while :; do
    if [ ! -e "$port" ]; then sleep 0.2; continue; fi
    exec 3<>"$port" || { sleep 0.2; continue; }
    echo READY >&3 || { exec 3>&-; sleep 0.2; continue; }
    # read fails (EOF) while no host is connected: reopen then. bash reads a line from a
    # character device byte by byte, so a PUT's data starts right after its line.
    while IFS= read -r line <&3; do
        read -r verb id arg path <<<"$line"
        case $verb in
        RUN)
            echo "dp-agent: run $id"
            printf '%s' "$arg" | base64 -d >/run/dp-agent/cmd.sh
            bash /run/dp-agent/cmd.sh </dev/null >/run/dp-agent/out 2>&1
            ;;
        PUT)
            echo "dp-agent: put $id $path ($arg bytes)"
            # head -c never reads past its count
            head -c "$arg" <&3 >"$path" 2>/run/dp-agent/out &&
                [ "$(stat -c %s "$path")" = "$arg" ]
            ;;
        *) continue ;;
        esac
        rc=$?
        echo "dp-agent: end $id rc=$rc"
        printf 'END %s %s %s\n' "$id" "$rc" "$(base64 -w0 /run/dp-agent/out)" >&3
    done
    exec 3>&-
    sleep 0.2
done
EOF
cat >"$R/etc/systemd/system/dp-agent.service" <<'EOF'
[Unit]
Description=driveprobe test agent (commands from the host over virtio-serial)
DefaultDependencies=no
After=systemd-udevd.service
[Service]
ExecStart=/usr/local/sbin/dp-agent
StandardOutput=journal+console
[Install]
WantedBy=multi-user.target
EOF
systemctl --root="$R" enable dp-agent.service systemd-networkd.service >&2

rm -f "$W/rootfs.img"
truncate -s 3G "$W/rootfs.img"
mkfs.ext4 -q -F -L dpguest-root -d "$R" "$W/rootfs.img"
rm -rf "$R"
mv "$W/rootfs.img" "$W/vmlinuz" "$W/initrd.img" "$CACHE/"
echo "$want" >"$CACHE/stamp"
print $(($(date +%s) - start))
