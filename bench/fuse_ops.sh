#!/usr/bin/env bash
# bench/fuse_ops.sh — where an agent's per-file time goes: the FUSE requests the kernel sends
# ClawFS for each file of an untar, a `git clone`, a cold `git status`, an edit of 100 files and
# their `git commit -a`, a cold `grep -rn` and an
# `rm -rf`, counted by opcode with the kernel's own `fuse:fuse_request_send` tracepoint (an ftrace histogram
# filtered to this mount's connection), as the sandboxed agent fs-engine and as root, on the
# same mount. Counts do not depend on the build or on the machine's load. Prints, per workload,
# a markdown table of requests per file.
#
#   bash bench/fuse_ops.sh [--clawfs-bin BIN] [--files N] [--workdir DIR]
#
# Run as root. Without --clawfs-bin it builds target/release/clawfs first.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

bin="" files=3000 work=/tmp/clawfs-fuse-ops
while [[ $# -gt 0 ]]; do
    case $1 in
        --clawfs-bin) bin=$2; shift 2 ;;
        --files) files=$2; shift 2 ;;
        --workdir) work=$2; shift 2 ;;
        -h|--help) sed -n 2,11p "$0"; exit 0 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
[[ $(id -u) -eq 0 ]] || { echo "$0: run as root" >&2; exit 1; }
bin=$(release_clawfs "$bin")
tracefs=/sys/kernel/tracing
[[ -d $tracefs/events/fuse/fuse_request_send ]] || mount -t tracefs tracefs "$tracefs"
event=$tracefs/events/fuse/fuse_request_send
[[ -d $event ]] || { echo "$0: this kernel has no fuse:fuse_request_send tracepoint" >&2; exit 1; }

store=$work/store mnt=$work/mnt
stop() {
    rmdir "$tracefs/instances/clawfs-fuse-ops-$$" 2>/dev/null || true
    "$bin" umount "$mnt" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap stop EXIT
rm -rf "$work"; mkdir -p "$work/inputs" "$mnt"

# An npm-like tree of $files files (5 KB each, 30 to a package, three folders deep) as a
# tarball, and a git repository of the same files.
python3 - "$work/inputs" "$files" <<'PY'
import os, sys, subprocess
root, n = sys.argv[1], int(sys.argv[2])
nm = os.path.join(root, "tree", "node_modules")
for i in range(n):
    d = os.path.join(nm, f"pkg{i // 30:03}", "lib", f"sub{i % 3}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i}.js"), "wb") as f:
        f.write(b"x" * 5200)
env = dict(os.environ, GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL="/dev/null")
git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.invalid"]
for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "tree"]):
    subprocess.run(git + args, cwd=os.path.join(root, "tree"), env=env, check=True)
PY
tar cf "$work/inputs/tree.tar" -C "$work/inputs/tree" node_modules
chmod -R a+rX "$work/inputs"

"$bin" init --store "$store" >&2
"$bin" mount "$mnt" --store "$store" >&2
conn=$(stat -c %d "$mnt")
ws=$mnt/workspaces/default
cp "$work/inputs/tree.tar" "$ws/tree.tar"
cp -a "$work/inputs/tree" "$ws/repo"

# Counts the requests of this mount's connection while "$@" runs, from a trace instance of
# its own (its own buffer, the event filtered to this connection): "OPCODE COUNT" lines.
inst=$tracefs/instances/clawfs-fuse-ops-$$
count() {
    # Cold: what a first look at the files costs.
    sync; echo 3 > /proc/sys/vm/drop_caches
    [[ -d $inst ]] || mkdir "$inst"
    echo 65536 > "$inst/buffer_size_kb"
    echo "connection == $conn" > "$inst/events/fuse/fuse_request_send/filter"
    : > "$inst/trace"
    echo 1 > "$inst/events/fuse/fuse_request_send/enable"
    "$@" >/dev/null
    echo 0 > "$inst/events/fuse/fuse_request_send/enable"
    if grep -q 'LOST' "$inst/trace"; then echo "$0: events were lost; raise buffer_size_kb" >&2; exit 1; fi
    # GETXATTR (22) by the length of its request, which tells the name asked for.
    sed -nE 's/.* opcode ([0-9]+) \(.* len ([0-9]+).*/\1 \2/p' "$inst/trace" |
        awk '{ print ($1 == 22 ? $1 "." $2 : $1) }' | sort -n | uniq -c | awk '{ print $2, $1 }'
}

# git trusts the repositories of others only by safe.directory, read from the global config.
gitconfig=$mnt/agents/fs-engine/.gitconfig
printf '[safe]\n\tdirectory = *\n[user]\n\tname = b\n\temail = b@example.invalid\n' > "$gitconfig"
chmod 644 "$gitconfig"

as_agent() {
    "$bin" run --store "$store" --mount "$mnt" --agent fs-engine -- \
        env HOME="$mnt/agents/fs-engine" GIT_CONFIG_NOSYSTEM=1 sh -c "$1" step "$ws"
}
as_root() {
    env GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL="$gitconfig" sh -c "$1" step "$ws"
}
git_id=git
declare -A steps=(
    [untar]='mkdir -p "$1/$W" && tar xf "$1/tree.tar" -C "$1/$W"'
    [clone]="$git_id clone -q --no-hardlinks \"\$1/repo\" \"\$1/\$W-clone\""
    [status]="cd \"\$1/\$W-clone\" && $git_id status --porcelain"
    [commit]="cd \"\$1/\$W-clone\" && for f in node_modules/pkg00*/lib/sub0/*.js; do echo '// edited' >> \"\$f\"; done && $git_id commit -qam edit"
    [grep]='grep -rn "return 7777 " "$1/$W-clone" || true'
    [rm]='rm -rf "$1/$W" "$1/$W-clone"'
)
order=(untar clone status commit grep rm)

names() {
    case $1 in
        1) echo LOOKUP ;; 2) echo FORGET ;; 3) echo GETATTR ;; 4) echo SETATTR ;; 9) echo MKDIR ;;
        6) echo SYMLINK ;; 10) echo UNLINK ;; 11) echo RMDIR ;; 12) echo RENAME ;; 17) echo STATFS ;;
        47) echo COPY_FILE_RANGE ;; 14) echo OPEN ;; 15) echo READ ;; 16) echo WRITE ;;
        18) echo RELEASE ;; 20) echo FSYNC ;; 21) echo SETXATTR ;; 22) echo GETXATTR ;;
        22.68) echo 'GETXATTR security.capability' ;;
        22.72) echo 'GETXATTR system.posix_acl_access' ;;
        22.73) echo 'GETXATTR system.posix_acl_default' ;;
        22.*) echo 'GETXATTR (other)' ;;
        23) echo LISTXATTR ;; 25) echo FLUSH ;; 27) echo OPENDIR ;; 28) echo READDIR ;;
        29) echo RELEASEDIR ;; 34) echo ACCESS ;; 35) echo CREATE ;; 42) echo BATCH_FORGET ;;
        44) echo READDIRPLUS ;; 45) echo RENAME2 ;; 52) echo STATX ;; *) echo "op$1" ;;
    esac
}

# COUNT per file, two decimals.
per() { awk -v n="$1" -v f="$files" 'BEGIN { printf "%.2f", n / f }'; }

declare -A got
for who in agent root; do
    for step in "${order[@]}"; do
        script="W=$who; ${steps[$step]}"
        if [[ $who == agent ]]; then
            out=$(count as_agent "$script")
        else
            out=$(count as_root "$script")
        fi
        total=0
        while read -r op n; do
            [[ -z $op ]] && continue
            got[$step,$who,$op]=$n
            total=$((total + n))
        done <<< "$out"
        got[$step,$who,total]=$total
    done
done

for step in "${order[@]}"; do
    echo
    echo "### $step ($files files): FUSE requests per file"
    echo
    echo "| request | sandboxed agent | root |"
    echo "|---|---:|---:|"
    ops=$(for k in "${!got[@]}"; do
        IFS=, read -r s _ op <<< "$k"
        if [[ $s == "$step" && $op != total ]]; then echo "$op"; fi
    done | sort -n | uniq)
    for op in $ops; do
        a=${got[$step,agent,$op]:-0} r=${got[$step,root,$op]:-0}
        printf '| %s | %s | %s |\n' "$(names "$op")" "$(per "$a")" "$(per "$r")"
    done
    printf '| **all** | **%s** | **%s** |\n' "$(per "${got[$step,agent,total]}")" \
        "$(per "${got[$step,root,total]}")"
done
