#!/usr/bin/env bash
# Kernel and initramfs for the VM tests (tests/vm/health.rs, through tests/vm/harness.rs).
#
#   build-initramfs.sh base
#       Makes sure the cached kernel and base initramfs are built, and prints
#         kernel=PATH
#         initramfs=PATH
#       The base is rebuilt only when this script, the kernel package or the host tools
#       packed into it change (a stamp records them).
#   build-initramfs.sh overlay OUT [--bin FILE] [--payload FILE] [--file SRC:DEST]...
#       Writes OUT, an uncompressed cpio archive to append to the base initramfs
#       (cat base overlay > initrd): the kernel unpacks both, later files win. --bin puts an
#       executable (the driveprobe that Cargo built) in /usr/bin with its shared libraries;
#       --payload becomes /payload.sh, which the base's /init runs.
#
# Only Debian packages are used: the kernel package is downloaded (not installed) with
# `apt-get download` and extracted into the cache; busybox-static, nvme-cli, smartmontools,
# dmsetup, kmod (host-side depmod/modprobe), cpio. Nothing here touches a block device of the host.
#
# Environment: DRIVEPROBE_VM_CACHE (default: target/vm-cache under the repo),
#              DRIVEPROBE_VM_KPKG (default: linux-image-6.1.0-57-amd64).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
CACHE=${DRIVEPROBE_VM_CACHE:-$REPO/target/vm-cache}
KPKG=${DRIVEPROBE_VM_KPKG:-linux-image-6.1.0-57-amd64}
KVER=${KPKG#linux-image-}

# Modules in the image. All are loadable with `modprobe NAME [params]` in a payload.
# AUTOLOAD ones are loaded by /init before the payload runs; null_blk and scsi_debug create
# devices when loaded (scsi_debug would take a /dev/sdX name), so payloads load them.
# ext4 (which also mounts ext2) is loaded by payloads that put a filesystem on a disk,
# after crc32c_generic (its soft dependency, which busybox modprobe does not follow).
MODS="nvme ahci sd_mod dm_mod dm_delay dm_flakey virtio_pci virtio_blk null_blk scsi_debug ext4 crc32c_generic"
# virtio_pci and virtio_blk: the virtio disk of VmBuilder::virtio and hot-added ones.
AUTOLOAD="nvme ahci sd_mod dm_mod dm_delay dm_flakey virtio_pci virtio_blk"
# Host tools packed with their shared libraries (ldd lists them). dmsetup makes the
# device-mapper fault targets (error, flakey, delay) and holders in tests/vm/faults.rs; in
# the guest it runs without udev (payloads export DM_DISABLE_UDEV=1).
TOOLS="/usr/sbin/nvme /usr/sbin/smartctl /usr/sbin/dmsetup"

die() { echo "build-initramfs.sh: $*" >&2; exit 1; }

need() {
    for c in "$@"; do
        command -v "$c" >/dev/null 2>&1 ||
            die "missing '$c': install the VM test packages (scripts/test does: qemu-system-x86 busybox-static cpio kmod nvme-cli smartmontools dmsetup)"
    done
}

# copy_with_libs ROOT FILE [DEST]: FILE at DEST (default: its own path) under ROOT, with the
# shared libraries ldd names (and the loader), at their real paths.
copy_with_libs() {
    local root=$1 bin=$2 dest=${3:-$2}
    install -D -m 0755 "$bin" "$root$dest"
    ldd "$bin" 2>/dev/null | awk '/=> \//{print $3} /^[ \t]*\/[^ ]*ld-linux/{print $1}' |
        while read -r lib; do
            [ -e "$root$lib" ] || install -D -m 0755 "$(readlink -f "$lib")" "$root$lib"
        done
}

pack() { # pack DIR -> cpio newc on stdout (owned by root, stable order)
    (cd "$1" && find . -print0 | LC_ALL=C sort -z |
        cpio --null -o -H newc --owner=0:0 --quiet)
}

# download() PKG: the package's .deb into $CACHE/dl (apt-get update once when needed)
download() {
    need apt-get
    # apt-get download writes to the current directory; as root it warns that _apt cannot
    # write there, which is harmless.
    (cd "$CACHE/dl" && apt-get download "$1" >/dev/null 2>&1) && return 0
    apt-get update -qq >/dev/null 2>&1 || true
    (cd "$CACHE/dl" && apt-get download "$1" >/dev/null 2>&1)
}

kernel_tree() { # download and extract the kernel package once; sets TREE (and KPKG, KVER)
    mkdir -p "$CACHE/dl"
    local deb
    # a replacement chosen by an earlier run (below)
    if [ -f "$CACHE/dl/$KPKG.replaced-by" ]; then
        KPKG=$(cat "$CACHE/dl/$KPKG.replaced-by")
        KVER=${KPKG#linux-image-}
    fi
    deb=$(ls "$CACHE/dl/${KPKG}"_*.deb 2>/dev/null | head -1 || true)
    if [ -z "$deb" ]; then
        if ! download "$KPKG"; then
            # The archive drops old kernel ABIs: take the one linux-image-amd64 names now.
            local cur
            cur=$(apt-cache depends linux-image-amd64 2>/dev/null |
                awk '/Depends: linux-image-[0-9]/{print $2; exit}')
            [ -n "$cur" ] || die "apt-get download $KPKG failed, and linux-image-amd64 names no kernel"
            echo "build-initramfs.sh: $KPKG is not in the archive; using $cur" >&2
            echo "$cur" > "$CACHE/dl/$KPKG.replaced-by"
            KPKG=$cur
            KVER=${KPKG#linux-image-}
            deb=$(ls "$CACHE/dl/${KPKG}"_*.deb 2>/dev/null | head -1 || true)
            [ -n "$deb" ] || download "$KPKG" || die "apt-get download $KPKG failed"
        fi
        deb=$(ls "$CACHE/dl/${KPKG}"_*.deb | head -1)
    fi
    TREE=$CACHE/kernel/$(basename "$deb" .deb)
    if [ ! -f "$TREE/.extracted" ]; then
        rm -rf "$TREE"
        mkdir -p "$TREE"
        dpkg -x "$deb" "$TREE"
        depmod -b "$TREE" "$KVER"
        touch "$TREE/.extracted"
    fi
}

build_base() {
    need busybox cpio depmod modprobe gzip ldd dpkg
    [ -x /bin/busybox ] && /bin/busybox --list >/dev/null 2>&1 || die "busybox-static missing"
    local tree stamp want out
    kernel_tree
    tree=$TREE
    out=$CACHE/base
    mkdir -p "$out"
    # What the base depends on: this script, the kernel package, the packed host tools.
    want=$( {
        sha256sum "$0" | cut -d' ' -f1
        basename "$tree"
        dpkg-query -W -f '${Package} ${Version}\n' busybox-static nvme-cli smartmontools dmsetup 2>/dev/null || true
    } | sha256sum | cut -d' ' -f1)
    stamp=$out/stamp
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] &&
        [ -f "$out/initramfs.cpio.gz" ] && [ -f "$out/vmlinuz" ]; then
        return 0
    fi
    echo "build-initramfs.sh: building the base initramfs in $out" >&2

    local R
    R=$(mktemp -d "$CACHE/rootfs.XXXXXX")
    # shellcheck disable=SC2064
    trap "rm -rf '$R'" EXIT
    mkdir -p "$R"/{bin,sbin,usr/bin,usr/sbin,dev,proc,sys,tmp,run,etc,root,lib/modules/"$KVER",lib64,var/lib/smartmontools,usr/share/smartmontools}

    cp /bin/busybox "$R/bin/busybox"
    local app
    for app in $("$R/bin/busybox" --list); do
        [ -e "$R/bin/$app" ] || ln -s busybox "$R/bin/$app"
    done
    local t
    for t in $TOOLS; do
        [ -x "$t" ] || die "missing $t: install the Debian package that has it (scripts/test does: nvme-cli smartmontools dmsetup)"
        copy_with_libs "$R" "$t"
    done
    cp /usr/share/smartmontools/drivedb.h "$R/usr/share/smartmontools/" 2>/dev/null || true
    echo "root:x:0:0:root:/root:/bin/sh" > "$R/etc/passwd"
    echo "root:x:0:" > "$R/etc/group"

    # Modules with their dependencies (resolved on the host by kmod's modprobe), at their
    # paths under /lib/modules/KVER, then depmod on the image so busybox modprobe works.
    local m ko rel
    for m in $MODS; do
        modprobe -d "$tree" -S "$KVER" --show-depends "$m" >/dev/null 2>&1 ||
            die "module $m is not in $KPKG"
        modprobe -d "$tree" -S "$KVER" --show-depends "$m" | awk '$1=="insmod"{print $2}'
    done | awk '!seen[$0]++' | while read -r ko; do
        rel=${ko#"$tree"/lib/modules/"$KVER"/}
        install -D -m 0644 "$ko" "$R/lib/modules/$KVER/$rel"
    done
    cp "$tree/lib/modules/$KVER"/modules.{order,builtin,builtin.modinfo} "$R/lib/modules/$KVER/" 2>/dev/null || true
    depmod -b "$R" "$KVER"
    echo "$AUTOLOAD" > "$R/etc/autoload-modules"

    # Helpers for payloads: `. /lib/vm.sh`
    cat > "$R/lib/vm.sh" <<'EOF'
# Sourced by payloads. Output is framed for the host (tests/vm/harness.rs):
#   === BEGIN name
#   ...
#   === END name rc=N
# run NAME CMD...      stdout and stderr of CMD in section NAME
run() {
    _n=$1; shift
    echo "=== BEGIN $_n"
    "$@" 2>&1
    _rc=$?
    echo "=== END $_n rc=$_rc"
    return $_rc
}
# runout NAME CMD...   stdout of CMD in section NAME (for JSON); stderr in NAME.stderr
runout() {
    _n=$1; shift
    "$@" > "/tmp/$_n.out" 2> "/tmp/$_n.err"
    _rc=$?
    echo "=== BEGIN $_n"
    cat "/tmp/$_n.out"
    [ -z "$(tail -c 1 "/tmp/$_n.out")" ] || echo
    echo "=== END $_n rc=$_rc"
    if [ -s "/tmp/$_n.err" ]; then
        echo "=== BEGIN $_n.stderr"; cat "/tmp/$_n.err"; echo "=== END $_n.stderr rc=0"
    fi
    return $_rc
}
# runhex NAME CMD...   stdout of CMD hex-dumped (xxd -p) in section NAME; stderr in NAME.stderr
runhex() {
    _n=$1; shift
    "$@" > "/tmp/$_n.out" 2> "/tmp/$_n.err"
    _rc=$?
    echo "=== BEGIN $_n"
    xxd -p "/tmp/$_n.out"
    echo "=== END $_n rc=$_rc"
    if [ -s "/tmp/$_n.err" ]; then
        echo "=== BEGIN $_n.stderr"; cat "/tmp/$_n.err"; echo "=== END $_n.stderr rc=0"
    fi
    return $_rc
}
# ready NAME           tell the host the guest waits for it (the harness polls for this line)
ready() { echo "=== READY $1"; }
# wait_dev PATH [TENTHS]  wait until PATH exists (default 30 s); 1 when it does not
wait_dev() {
    _i=0; _max=${2:-300}
    while [ "$_i" -lt "$_max" ]; do
        [ -e "$1" ] && return 0
        sleep 0.1; _i=$((_i + 1))
    done
    echo "=== TIMEOUT waiting for $1"; return 1
}
# nvme_cw              the NVMe critical warning byte (decimal), read with nvme-cli
nvme_cw() {
    nvme smart-log /dev/nvme0 -o json 2>/dev/null |
        sed -n 's/.*"critical_warning" *: *\([0-9]*\).*/\1/p'
}
# wait_nvme_cw [TENTHS]  wait until the NVMe critical warning is non-zero (default 60 s)
wait_nvme_cw() {
    _i=0; _max=${1:-600}
    while [ "$_i" -lt "$_max" ]; do
        _cw=$(nvme_cw)
        if [ -n "$_cw" ] && [ "$_cw" != 0 ]; then
            echo "=== SAW critical_warning=$_cw after $_i polls"; return 0
        fi
        sleep 0.1; _i=$((_i + 1))
    done
    echo "=== TIMEOUT waiting for a critical warning"; return 1
}
EOF

    cat > "$R/init" <<'EOF'
#!/bin/sh
export PATH=/usr/local/bin:/usr/bin:/usr/sbin:/bin:/sbin HOME=/root
# no colours on the console: output is parsed on the host
export NO_COLOR=1 TERM=dumb
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
# The kernel's whole log to the second serial port (the host shows it when a boot fails);
# the console keeps loglevel=1 so that nothing the kernel says lands inside a section.
KMSG=
if [ -c /dev/ttyS1 ]; then
    cat /proc/kmsg > /dev/ttyS1 2>/dev/null &
    KMSG=$!
fi
echo "=== GUEST UP uptime=$(cut -d' ' -f1 /proc/uptime) kernel=$(uname -r)"
for m in $(cat /etc/autoload-modules); do
    modprobe "$m" || echo "=== MODULE $m failed to load"
done
# wait (max ~10 s) for the disks
i=0
while [ $i -lt 100 ]; do
    [ -b /dev/nvme0n1 ] && [ -b /dev/sda ] && break
    sleep 0.1; i=$((i + 1))
done
echo "=== DEVICES after $i polls: $(ls /dev | grep -E '^(nvme|sd)' | tr '\n' ' ')"
if [ -f /payload.sh ]; then
    sh /payload.sh
    echo "=== PAYLOAD EXIT rc=$?"
else
    echo "=== NO PAYLOAD"
fi
sync
# The kernel's log complete on the host before the power goes: the copy's last close of
# the port waits until what it wrote has left.
if [ -n "$KMSG" ]; then
    sleep 0.2
    kill "$KMSG"
    wait "$KMSG" 2>/dev/null
fi
echo "=== GUEST DONE uptime=$(cut -d' ' -f1 /proc/uptime)"
poweroff -f
EOF
    chmod 0755 "$R/init"

    pack "$R" | gzip -1 > "$out/initramfs.cpio.gz.tmp"
    # The kernel takes an appended archive as uncompressed cpio only when it starts on a
    # 4-byte boundary (zeros between archives are skipped): pad to 512 bytes.
    truncate -s %512 "$out/initramfs.cpio.gz.tmp"
    mv "$out/initramfs.cpio.gz.tmp" "$out/initramfs.cpio.gz"
    cp "$tree/boot/vmlinuz-$KVER" "$out/vmlinuz"
    echo "$want" > "$stamp"
    rm -rf "$R"
    trap - EXIT
}

cmd=${1:-}
case $cmd in
base)
    mkdir -p "$CACHE"
    # Tests boot in parallel: one builder at a time, the others wait and reuse.
    exec 9>"$CACHE/.lock"
    flock 9
    build_base
    echo "kernel=$CACHE/base/vmlinuz"
    echo "initramfs=$CACHE/base/initramfs.cpio.gz"
    ;;
overlay)
    shift
    [ $# -ge 1 ] || die "usage: overlay OUT [--bin FILE] [--payload FILE] [--file SRC:DEST]..."
    need cpio ldd
    out=$1; shift
    R=$(mktemp -d "${TMPDIR:-/tmp}/vm-overlay.XXXXXX")
    trap 'rm -rf "$R"' EXIT
    while [ $# -gt 0 ]; do
        case $1 in
        --bin)
            [ -x "$2" ] || die "not an executable: $2"
            name=$(basename "$2")
            # Debug info is most of a debug build; the guest does not need it.
            if command -v strip >/dev/null 2>&1; then
                mkdir -p "$R/usr/local/bin"
                strip --strip-debug -o "$R/usr/local/bin/$name" "$2"
                copy_with_libs "$R" "$2" "/usr/local/bin/$name.unused"
                rm -f "$R/usr/local/bin/$name.unused"
            else
                copy_with_libs "$R" "$2" "/usr/local/bin/$name"
            fi
            chmod 0755 "$R/usr/local/bin/$name"
            shift 2 ;;
        --payload)
            install -m 0755 "$2" "$R/payload.sh"
            shift 2 ;;
        --file)
            src=${2%%:*}; dest=${2#*:}
            install -D -m 0644 "$src" "$R$dest"
            shift 2 ;;
        *) die "unknown option $1" ;;
        esac
    done
    pack "$R" > "$out"
    ;;
*)
    die "usage: build-initramfs.sh base | overlay OUT [--bin FILE] [--payload FILE] [--file SRC:DEST]..."
    ;;
esac
