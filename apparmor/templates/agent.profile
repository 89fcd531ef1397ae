# ClawFS per-agent AppArmor profile, rendered by clawfs-apparmor for agent "{{agent}}".
# Mirrors the Landlock layer of `clawfs run --sandbox`: system files read/execute, the mount
# read-only, the agent's own directory, granted workspaces and private temp dir read-write, the
# store, shadow files, ptrace, mount and capabilities denied.
abi <abi/3.0>,
include <tunables/global>

profile {{profile}} flags=(attach_disconnected) {
  include <abstractions/base>

  # System trees: read, map and execute (children stay in this profile).
  /usr/ r,
  /usr/** mrix,
  /bin/ r,
  /bin/** mrix,
  /sbin/ r,
  /sbin/** mrix,
  /{lib,lib32,lib64,libx32}/ r,
  /{lib,lib32,lib64,libx32}/** mrix,

  # /etc, file by file (never /etc as a whole).
  /etc/{passwd,group,nsswitch.conf,host.conf,gai.conf,hosts,hostname,resolv.conf} r,
  /etc/{services,protocols,networks,netconfig,localtime,timezone,locale.alias,locale.conf} r,
  /etc/{ld.so.cache,ld.so.conf,default/locale,ca-certificates.conf,gitconfig,mime.types} r,
  /etc/{inputrc,shells,profile,bash.bashrc,environment,os-release,debian_version,lsb-release} r,
  /etc/ld.so.conf.d/{,**} r,
  /etc/alternatives/{,**} r,
  /etc/ssl/certs/{,**} r,
  /etc/ssl/openssl.cnf r,
  /etc/ca-certificates/{,**} r,
  /etc/pki/tls/certs/{,**} r,
  /etc/python3*/{,**} r,
  /etc/ssh/ssh_config r,
  /etc/ssh/ssh_config.d/{,**} r,
  /etc/magic* r,
  /etc/terminfo/{,**} r,
  /etc/profile.d/{,**} r,

  # Kernel information runtimes read.
  /sys/devices/system/cpu/{,**} r,
  /sys/devices/system/node/{,**} r,
  /sys/kernel/mm/transparent_hugepage/{,**} r,
  @{PROC}/{cpuinfo,meminfo,stat,loadavg,uptime,version,filesystems} r,
  @{PROC}/sys/kernel/{osrelease,ostype,hostname,ngroups_max,pid_max,cap_last_cap} r,
  @{PROC}/sys/vm/overcommit_memory r,
  @{PROC}/sys/net/core/somaxconn r,
  @{PROC}/sys/fs/nr_open r,
  owner @{PROC}/@{pid}/** r,

  # Devices.
  /dev/{null,zero,full,random,urandom,tty,ptmx} rw,
  /dev/pts/* rw,

  # Secrets of the host: never.
  deny /etc/{shadow,gshadow,shadow-,gshadow-,sudoers} rwklmx,
  deny /etc/sudoers.d/{,**} rwklmx,
  deny /etc/ssh/ssh_host_* rwklmx,
  deny /etc/ssl/private/{,**} rwklmx,

  # The ClawFS mount: read.
  "{{mount}}/" r,
  "{{mount}}/**" r,

  # The agent's own directory and its private temporary directory: read-write.
  "{{own_dir}}/" rw,
  "{{own_dir}}/**" rwklmix,
  "{{tmp}}/" rw,
  "{{tmp}}/**" rwklmix,

  # Workspaces granted read-write.
{{read_write}}
  # Extra read-only paths.
{{read_only}}
  # The backing store: never, whatever else allows.
  deny "{{store}}/" rwklmx,
  deny "{{store}}/**" rwklmx,

  # No debugging other processes, no mounts, no capabilities.
  deny ptrace,
  deny mount,
  deny umount,
  deny pivot_root,
  deny capability,
  signal (send, receive) peer={{profile}},

  # Network.
{{network}}
}
