#!/usr/bin/env bash
# xfstests (kdave/xfstests, a.k.a. fstests) on ClawFS.
#
#   bash bench/xfstests.sh [--src DIR] [--clawfs-bin BIN] [--tests "generic/quick"]
#                          [--workdir DIR] [--timeout SECONDS] [--max-time SECONDS]
#                          [--store-size SIZE]
#
# Builds xfstests from source (clones it into WORKDIR/xfstests unless --src names an existing
# checkout, which is then built in place), creates two ClawFS stores (test and scratch) and runs
# ./check with FSTYP=fuse, FUSE_SUBTYP=.clawfs on them, excluding the tests listed in
# bench/xfstests.exclude (one reason per test). --tests takes groups ("generic/quick" means
# `-g generic/quick`) and/or single tests ("generic/001 generic/002").
#
# How the mount is made. xfstests wants TEST_DIR (SCRATCH_MNT) to be the mount point of
# TEST_DEV (SCRATCH_DEV) -- it checks `findmnt -S $TEST_DEV` == "$TEST_DEV $TEST_DIR" and the
# type with df -- but at a ClawFS mount root files may only be created inside
# workspaces/<name>/. So this script sets MOUNT_PROG (local.config is sourced after
# common/config sets it, so the override sticks) to a small wrapper, WORKDIR/bin/mount:
# for `mount -t fuse.clawfs STORE DIR` it mounts the store at a private directory
# (WORKDIR/hidden/<name>), creates workspaces/default/xfstests there, bind-mounts that folder
# onto DIR and lazily unmounts the private mount point. What is left is exactly one mount, on
# DIR, whose source is STORE (ClawFS's fsname is the store path) and whose type is
# fuse.clawfs: xfstests' own checks then pass (DF_PROG is likewise wrapped so that df's type
# column reads "fuse", the FSTYP, rather than "fuse.clawfs"). Every other mount call goes to the
# real mount(8). Unmounting DIR (xfstests does `umount $TEST_DEV`) drops the last reference to
# the FUSE superblock, so the daemon really stops and a later mount starts a fresh one
# (remount tests really remount). UMOUNT_PROG is wrapped too, because umount(8) does not find
# a bind mount by its source. The bind targets a subfolder so that tests which empty
# TEST_DIR do not delete the workspace's own metadata. Nothing is installed outside WORKDIR
# and the xfstests checkout, except the apt build dependencies; the system's
# mount.fuse.clawfs helper is not needed. _scratch_mkfs is a no-op for FSTYP=fuse, so the
# scratch store is created once with `clawfs init`. Mount options tests pass with -o are
# ignored, as mount.fuse.clawfs ignores the generic ones (noatime, nodev, ...), except ro, which
# is refused as mount.fuse.clawfs refuses it. A second mount of an already mounted store (one
# fs at two mount points, generic/732) bind-mounts the existing mount: ClawFS serves a store
# from one daemon only.
#
# xfstests has no per-test timeout: a watchdog here kills a test that runs longer than
# --timeout seconds (default 300; it is then reported as failed and listed in
# WORKDIR/timeouts) and, if it is stuck in a FUSE request, aborts the FUSE connection.
# --max-time stops the whole run after that many seconds (the summary then counts what ran).
# --store-size is the size of the ext4 image the two stores live on (default 16G, sparse).
#
# Output: WORKDIR/check.log (the ./check output), WORKDIR/results/ (xfstests results: *.out.bad,
# *.full), and a summary on stdout: passed / failed / not run, and the failing tests each
# with the first differing line of its .out.bad (or the check message).
set -u -o pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
SRC=""
BIN="$REPO/target/release/clawfs"
TESTS="generic/quick"
WORKDIR=/tmp/clawfs-xfstests
TIMEOUT=300
MAX_TIME=0
STORE_SIZE=16G
EXCLUDE="$HERE/xfstests.exclude"

while [ $# -gt 0 ]; do
	case "$1" in
	--src) SRC=$2; shift 2 ;;
	--clawfs-bin) BIN=$2; shift 2 ;;
	--tests) TESTS=$2; shift 2 ;;
	--workdir) WORKDIR=$2; shift 2 ;;
	--timeout) TIMEOUT=$2; shift 2 ;;
	--max-time) MAX_TIME=$2; shift 2 ;;
	--store-size) STORE_SIZE=$2; shift 2 ;;
	--exclude) EXCLUDE=$2; shift 2 ;;
	-h|--help) sed -n '2,45p' "$0"; exit 0 ;;
	*) echo "unknown argument: $1" >&2; exit 2 ;;
	esac
done

die() { echo "xfstests.sh: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "must run as root (xfstests mounts and unmounts)"
[ -x "$BIN" ] || die "no clawfs binary at $BIN (--clawfs-bin)"
BIN=$(readlink -f "$BIN")
mkdir -p "$WORKDIR"
WORKDIR=$(readlink -f "$WORKDIR")

# --- build dependencies ---------------------------------------------------------------
DEPS="build-essential autoconf automake libtool-bin pkg-config uuid-dev xfslibs-dev
libattr1-dev libacl1-dev libaio-dev liburing-dev libgdbm-dev libcap-dev attr acl xfsprogs
e2fsprogs bc fio psmisc quota gawk python3 util-linux git"
missing=$(for p in $DEPS; do dpkg -s "$p" >/dev/null 2>&1 || echo "$p"; done)
if [ -n "$missing" ]; then
	echo "== apt-get install $(echo $missing)"
	DEBIAN_FRONTEND=noninteractive apt-get install -y $missing >"$WORKDIR/apt.log" 2>&1 ||
		{ apt-get update >>"$WORKDIR/apt.log" 2>&1 &&
		  DEBIAN_FRONTEND=noninteractive apt-get install -y $missing >>"$WORKDIR/apt.log" 2>&1; } ||
		die "apt-get install failed, see $WORKDIR/apt.log"
fi

# --- source -----------------------------------------------------------------------------
if [ -z "$SRC" ]; then
	SRC="$WORKDIR/xfstests"
	if [ ! -e "$SRC/check" ]; then
		rm -rf "$SRC"
		for url in https://git.kernel.org/pub/scm/fs/xfs/xfstests-dev.git \
			https://github.com/kdave/xfstests; do
			echo "== git clone $url"
			timeout 600 git clone -q --depth 1 "$url" "$SRC" && break
			rm -rf "$SRC"
		done
		[ -e "$SRC/check" ] || die "could not clone xfstests; pass --src DIR (an existing checkout)"
	fi
fi
[ -e "$SRC/check" ] || die "$SRC is not an xfstests checkout (no ./check)"
SRC=$(readlink -f "$SRC")

# --- build ------------------------------------------------------------------------------
if [ ! -x "$SRC/ltp/fsstress" ] || [ ! -x "$SRC/src/xfsctl" ]; then
	echo "== make -j2 in $SRC"
	make -C "$SRC" -j2 >"$WORKDIR/build.log" 2>&1 || die "build failed, see $WORKDIR/build.log"
fi

# --- stores, mount points, mount wrapper, config -------------------------------------------
# The stores live on an ext4 image of their own (--store-size, sparse): a test that fills its
# filesystem on purpose (the ENOSPC cases) fills the image, never the host's disk.
STORES="$WORKDIR/stores"
mkdir -p "$STORES"
if ! findmnt -rn -M "$STORES" >/dev/null 2>&1; then
	img="$WORKDIR/stores.img"
	if [ ! -e "$img" ]; then
		truncate -s "$STORE_SIZE" "$img" && mkfs.ext4 -q -F "$img" ||
			{ rm -f "$img"; die "could not make the stores' image $img"; }
	fi
	mount -o loop "$img" "$STORES" || die "could not mount the stores' image $img"
fi
TEST_STORE="$STORES/test-store"
SCRATCH_STORE="$STORES/scratch-store"
for d in test scratch hidden/test-store hidden/scratch-store bin results; do mkdir -p "$WORKDIR/$d"; done
for s in "$TEST_STORE" "$SCRATCH_STORE"; do
	[ -d "$s/.clawfs" ] || [ -d "$s/workspaces" ] || "$BIN" init --store "$s" >/dev/null ||
		die "clawfs init --store $s failed"
done

cat >"$WORKDIR/bin/mount" <<EOF
#!/usr/bin/env bash
# MOUNT_PROG for xfstests: see bench/xfstests.sh. Only \`-t fuse.clawfs SRC DIR\` is ours.
ours=0; args=(); opts=()
while [ \$# -gt 0 ]; do
	case "\$1" in
	-t) [ "\$2" = fuse.clawfs ] && ours=1; tt=\$2; shift 2 ;;
	-t*) [ "\${1#-t}" = fuse.clawfs ] && ours=1; tt=\${1#-t}; shift ;;
	-o) opts+=("\$2"); shift 2 ;;
	-o*) opts+=("\${1#-o}"); shift ;;
	-*) args+=("\$1"); shift ;;
	*) args+=("\$1"); shift ;;
	esac
done
if [ \$ours = 0 ]; then
	set -- \${tt:+-t "\$tt"}
	for o in "\${opts[@]}"; do set -- "\$@" -o "\$o"; done
	exec /usr/bin/mount "\$@" "\${args[@]}"
fi
n=\${#args[@]}
[ \$n -ge 2 ] || { echo "mount wrapper: need SOURCE DIR" >&2; exit 1; }
store=\${args[\$((n-2))]}; dir=\${args[\$((n-1))]}
extra=()
for o in "\${opts[@]}"; do
	case ",\$o," in *,ro,*) echo "mount: ClawFS has no read-only mounts" >&2; exit 32 ;; esac
	case ",\$o," in *,strictatime,*) echo "mount: ClawFS does not offer strictatime" >&2; exit 32 ;; esac
	case ",\$o," in *,noatime,*) extra=(--atime noatime) ;; *,nodiratime,*) extra=(--atime nodiratime) ;; esac
done
hidden="$WORKDIR/hidden/\$(basename "\$store")"
mkdir -p "\$hidden"
if findmnt -rn -M "\$dir" >/dev/null 2>&1; then echo "mount: \$dir already mounted" >&2; exit 32; fi
# The store already mounted elsewhere (a test mounting one fs at two places): bind that mount.
other=\$(findmnt -rn -t fuse.clawfs -S "\$store" -o TARGET 2>/dev/null | head -1)
if [ -n "\$other" ]; then /usr/bin/mount --bind "\$other" "\$dir" && exit 0; exit 32; fi
# After an unmount the previous daemon needs a moment to exit and release the store.
for i in \$(seq 50); do
	out=\$($BIN mount "\$hidden" --store "\$store" "\${extra[@]}" 2>&1); rc=\$?
	echo "\$out" >>"$WORKDIR/mount.log"
	[ \$rc = 0 ] && break
	case "\$out" in *"already served"*) sleep 0.2 ;; *) break ;; esac
done
[ \$rc = 0 ] || { echo "mount: clawfs mount \$store failed: \$out" >&2; exit 32; }
mkdir -p "\$hidden/workspaces/default/xfstests" &&
	/usr/bin/mount --bind "\$hidden/workspaces/default/xfstests" "\$dir"
rc=\$?
umount -l "\$hidden"
[ \$rc = 0 ] || exit 32
exit 0
EOF
chmod +x "$WORKDIR/bin/mount"
# umount(8) cannot find a bind mount by its source (xfstests unmounts with `umount $TEST_DEV`):
# a store path is turned into its mount point.
cat >"$WORKDIR/bin/umount" <<'EOF'
#!/usr/bin/env bash
args=()
for a in "$@"; do
	if [[ "$a" != -* ]] && ! findmnt -rn -M "$a" >/dev/null 2>&1; then
		t=$(findmnt -rn -t fuse.clawfs -S "$a" -o TARGET 2>/dev/null | tail -1)
		[ -n "$t" ] && a=$t
	fi
	args+=("$a")
done
exec /usr/bin/umount "${args[@]}"
EOF
chmod +x "$WORKDIR/bin/umount"
# df -T reports the type as fuse.clawfs; xfstests compares it with FSTYP (fuse).
cat >"$WORKDIR/bin/df" <<'EOF'
#!/usr/bin/env bash
/usr/bin/df "$@" | awk '$2 == "fuse.clawfs" { $2 = "fuse" } { print }'
exit "${PIPESTATUS[0]}"
EOF
chmod +x "$WORKDIR/bin/df"

cat >"$SRC/local.config" <<EOF
# written by clawfs bench/xfstests.sh
export FSTYP=fuse
export FUSE_SUBTYP=.clawfs
export TEST_DEV=$TEST_STORE
export TEST_DIR=$WORKDIR/test
export SCRATCH_DEV=$SCRATCH_STORE
export SCRATCH_MNT=$WORKDIR/scratch
export RESULT_BASE=$WORKDIR/results
export MOUNT_PROG=$WORKDIR/bin/mount
export UMOUNT_PROG=$WORKDIR/bin/umount
export DF_PROG="$WORKDIR/bin/df -T -P"
EOF

# Nothing of ours may be mounted before ./check starts (it mounts TEST itself).
for m in "$WORKDIR/test" "$WORKDIR/scratch"; do
	findmnt -rn -M "$m" >/dev/null 2>&1 && umount "$m"
done

# --- run ------------------------------------------------------------------------------
targs=()
for t in $TESTS; do
	if [[ "$t" == */[0-9]* ]]; then targs+=("$t"); else targs+=(-g "$t"); fi
done
xargs=()
[ -f "$EXCLUDE" ] && { sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$EXCLUDE" | awk '{print $1}' >"$WORKDIR/exclude.list"; xargs=(-E "$WORKDIR/exclude.list"); }
: >"$WORKDIR/timeouts"

abort_fuse() { # abort the FUSE connections of our mounts (a test stuck in a FUSE request)
	awk -v w="$WORKDIR/" '$5 ~ "^"w && $0 ~ /fuse\.clawfs/ {split($3,d,":"); print d[2]}' \
		/proc/self/mountinfo | sort -u | while read -r minor; do
		[ -e "/sys/fs/fuse/connections/$minor/abort" ] && echo 1 >"/sys/fs/fuse/connections/$minor/abort"
	done
}
tree() { local p; for p in $(pgrep -P "$1"); do tree "$p"; done; echo "$1"; }

echo "== ./check ${xargs[*]} ${targs[*]}  (log: $WORKDIR/check.log)"
start=$(date +%s)
(cd "$SRC" && exec ./check "${xargs[@]}" "${targs[@]}") >"$WORKDIR/check.log" 2>&1 &
check_pid=$!
while kill -0 "$check_pid" 2>/dev/null; do
	sleep 5
	if [ "$MAX_TIME" -gt 0 ] && [ $(($(date +%s) - start)) -gt "$MAX_TIME" ]; then
		echo "== --max-time $MAX_TIME reached: stopping ./check" | tee -a "$WORKDIR/check.log"
		kill -TERM $(tree "$check_pid") 2>/dev/null; sleep 5; abort_fuse
		kill -KILL $(tree "$check_pid") 2>/dev/null
		break
	fi
	# the running test: a descendant whose command line ends in tests/<dir>/<number>
	for p in $(tree "$check_pid"); do
		cmd=$(tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline") || continue
		[[ "$cmd" =~ tests/([a-z0-9]+/[0-9]+)\ *$ ]] || continue
		t=${BASH_REMATCH[1]}
		age=$(ps -o etimes= -p "$p" 2>/dev/null | tr -d ' ')
		[ -n "$age" ] && [ "$age" -gt "$TIMEOUT" ] || continue
		echo "$t" >>"$WORKDIR/timeouts"
		echo "== watchdog: $t ran ${age}s > ${TIMEOUT}s, killing it" >>"$WORKDIR/watchdog.log"
		kill -TERM $(tree "$p") 2>/dev/null; sleep 10
		kill -0 "$p" 2>/dev/null && { abort_fuse; kill -KILL $(tree "$p") 2>/dev/null; }
		break
	done
done
wait "$check_pid" 2>/dev/null
elapsed=$(($(date +%s) - start))

# --- clean up ---------------------------------------------------------------------------
for m in "$WORKDIR/test" "$WORKDIR/scratch" "$WORKDIR/hidden/test-store" "$WORKDIR/hidden/scratch-store"; do
	findmnt -rn -M "$m" >/dev/null 2>&1 && { umount "$m" 2>/dev/null || umount -l "$m"; }
done
# The daemons release the stores once their mounts are gone.
for _ in 1 2 3 4 5 6 7 8 9 10; do umount "$STORES" 2>/dev/null && break; sleep 1; done

# --- summary ----------------------------------------------------------------------------
# ./check prints one line per test: "generic/001 3s ...  2s" (passed), "generic/002 [not run] why",
# "generic/003 [expunged]", "generic/004 - output mismatch (see ...)" or "[failed, exit status N]".
awk '
	/^[a-z0-9]+\/[0-9]+[ \t]/ {
		t = $1; cur = t
		if ($0 ~ /\[not run\]/) { st[t] = "notrun" }
		else if ($0 ~ /\[expunged\]/) { st[t] = "excluded" }
		else if ($0 ~ /output mismatch|\[failed|_check_.*inconsistent|dmesg/) { st[t] = "failed" }
		else if ($0 ~ /[0-9]+s$/) { st[t] = "passed" }
		else { st[t] = "unfinished" }
		order[++n] = t; next
	}
	cur != "" && /output mismatch|\[failed/ { st[cur] = "failed" }
	cur != "" && /[0-9]+s$/ && st[cur] == "unfinished" { st[cur] = "passed" }
	END { for (i = 1; i <= n; i++) if (!seen[order[i]]++) print order[i], st[order[i]] }
' "$WORKDIR/check.log" >"$WORKDIR/status"

count() { awk -v s="$1" '$2 == s' "$WORKDIR/status" | wc -l; }
echo
echo "== xfstests on ClawFS: $TESTS ($(date -u +%FT%TZ), ${elapsed}s, $(git -C "$SRC" log -1 --format=%h 2>/dev/null) xfstests)"
echo "passed:   $(count passed)"
echo "failed:   $(count failed)"
echo "not run:  $(count notrun)"
# ./check prints "[expunged]" for an excluded test without its name, at the end of the line before.
echo "excluded: $(grep -o '\[expunged\]' "$WORKDIR/check.log" | wc -l)"
[ "$(count unfinished)" -gt 0 ] && echo "unfinished (run stopped): $(awk '$2=="unfinished"{print $1}' "$WORKDIR/status" | tr '\n' ' ')"
if [ "$(count failed)" -gt 0 ]; then
	echo "failed tests:"
	awk '$2 == "failed" {print $1}' "$WORKDIR/status" | while read -r t; do
		bad="$WORKDIR/results/$t.out.bad"
		why=""
		grep -qx "$t" "$WORKDIR/timeouts" && why="timed out after ${TIMEOUT}s (killed by watchdog); "
		if [ -f "$bad" ] && [ -f "$SRC/tests/$t.out" ]; then
			d=$(diff "$SRC/tests/$t.out" "$bad")
			why+=$( (grep -m1 '^>' <<<"$d" || grep -m1 '^<' <<<"$d") | cut -c1-200)
		else
			why+=$(grep -A2 "^$t " "$WORKDIR/check.log" | grep -v "^$t " | head -1 | cut -c1-200)
		fi
		echo "  $t: $why"
	done
fi
