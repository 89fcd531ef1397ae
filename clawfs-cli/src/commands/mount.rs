//! `clawfs mount`: checks, then either serves in the foreground or starts a background daemon
//! (this same binary with `--foreground`) and waits until its mount is live.

use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use clawfs_audit::AuditLog;
use clawfs_core::fs::{
    invalidation_channel, ActivityLink, ActivityMonitor, Invalidation, InvalidationQueue,
};
use clawfs_core::store::{DaemonInfo, Store, StoreError};
use clawfs_core::ClawFs;
use clawfs_sandbox::events::AgentEvents;
use clawfs_store::mountinfo;
use fuser::{Config, MountOption, SessionACL};
use std::sync::Arc;
use tracing::{info, warn};

use crate::error::{mountpoint, Failure};
use crate::monitor::{Monitor, Recorder};
use crate::mounts::unmount;
use clawfs_args::mount::{AtimeArg, MountArgs};
use clawfs_fuse::adapter::{Adapter, AdapterConfig};

/// How long `clawfs mount` waits for a background daemon's mount to appear.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// Checks that `mp` can take a mount and returns its canonical path.
pub fn check_mountpoint(mp: &Path) -> Result<PathBuf, Failure> {
    let shown = mp.display();
    match std::fs::metadata(mp) {
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
            return Err(mountpoint(format!(
                "{shown}: a ClawFS daemon died and left its mount behind (Transport endpoint is not connected); run `clawfs umount {shown}` first"
            )))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(mountpoint(format!(
                "{shown}: no such directory; create it first (mkdir -p {shown})"
            )))
        }
        Err(e) => return Err(mountpoint(format!("{shown}: {e}"))),
        Ok(m) if !m.is_dir() => return Err(mountpoint(format!("{shown}: not a directory"))),
        Ok(_) => {}
    }
    let canonical = std::fs::canonicalize(mp).map_err(|e| mountpoint(format!("{shown}: {e}")))?;
    if let Some(m) = mountinfo::clawfs_mount_at(&canonical).context("reading mountinfo")? {
        return Err(mountpoint(format!(
            "{shown}: ClawFS is already mounted here (store {})",
            m.source
        )));
    }
    let mut entries =
        std::fs::read_dir(&canonical).map_err(|e| mountpoint(format!("{shown}: {e}")))?;
    if entries.next().is_some() {
        return Err(mountpoint(format!(
            "{shown}: directory is not empty; mount on an empty directory"
        )));
    }
    Ok(canonical)
}

/// Opens the store to serve: the default store is initialised on first use, as is an explicit
/// `--store` directory that does not exist yet or is empty.
/// Opens the store to serve, as the host `--host` names if it does.
fn open_store(path: &Path, host: Option<&str>) -> Result<Store, Failure> {
    let fresh = std::fs::read_dir(path)
        .map(|mut d| d.next().is_none())
        .unwrap_or(true);
    let store = match Store::open(path) {
        Err(StoreError::NotInitialised(_)) if fresh => Store::open_or_init(path)?,
        other => other?,
    };
    Ok(match host {
        Some(h) => store.as_host(h)?,
        None => store,
    })
}

/// `clawfs mount`.
pub fn mount(args: &MountArgs) -> Result<(), Failure> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(Failure::Other(anyhow::anyhow!(
            "clawfs mount must run as root: it opens backing files by handle (CAP_DAC_READ_SEARCH) and uses FUSE passthrough (CAP_SYS_ADMIN)"
        )));
    }
    let mp = check_mountpoint(&args.mountpoint)?;
    let store = open_store(
        &crate::mounts::store_path(&args.store.store),
        args.host.as_deref(),
    )?;
    // Refused here, on the user's terminal, before any daemon starts (a foreground mount is
    // checked by `serve`).
    let checked = match args.foreground {
        true => None,
        false => check_system(&store, args.allow_tampered_system)?,
    };
    if let Some(differences) = checked {
        eprintln!(
            "clawfs: serving although system/ differs from {} (--allow-tampered-system): {differences}",
            clawfs_integrity::system::MANIFEST
        );
    }
    if !args.foreground {
        crate::store_ops::report_repair(&store.close_to_others()?);
    }
    if args.foreground {
        serve(args, &mp, store)
    } else {
        // Fail here, with the message on the user's terminal, if another daemon holds it.
        drop(store.lock()?);
        start_background(args, &mp, &store)
    }
}

/// Compares the store's `system/` with its manifest. A difference, or no manifest, refuses the
/// mount (exit 5) unless `allow`, when it is returned for the record.
fn check_system(store: &Store, allow: bool) -> Result<Option<String>, Failure> {
    use clawfs_integrity::seal::{self, SealCheck};
    use clawfs_integrity::system::{self, Verification};
    let (verdict, sealed) = seal::verify(store.root(), store.vault_config(), store.root_fd())
        .map_err(|e| anyhow::anyhow!("checking system/ against its manifest: {e}"))?;
    if sealed == SealCheck::Locked {
        // Checked by the daemon when the vault is unlocked.
        eprintln!(
            "clawfs: the vault is locked: the seal of {} is checked once it is unlocked",
            system::MANIFEST
        );
    }
    let differences = match verdict {
        Verification::Intact => return Ok(None),
        Verification::Tampered(d) => d,
    };
    let list = differences
        .iter()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join("; ");
    if allow {
        return Ok(Some(list));
    }
    Err(Failure::Tampered(format!(
        "system/ differs from {}: {list}. Install changes with `clawfs system update`; \
         `clawfs mount --allow-tampered-system` serves the store anyway (audited)",
        system::MANIFEST
    )))
}

/// The command line of the daemon that `clawfs mount` starts in the background: the same
/// options, in the foreground. Destructured whole, so an option added to `MountArgs` does not
/// build until it is passed on here too (`--no-search` once was not: the daemon indexed).
fn foreground_argv(args: &MountArgs, mp: &Path, store: &Path) -> Vec<std::ffi::OsString> {
    let MountArgs {
        mountpoint: _,
        store: _,
        foreground: _,
        no_passthrough,
        threads,
        busy_poll,
        no_io_uring,
        max_open_per_caller,
        no_audit,
        trace_syscalls,
        attr_timeout,
        no_search,
        allow_tampered_system,
        atime,
        metrics,
        host,
    } = args;
    let mut argv: Vec<std::ffi::OsString> = vec![
        "mount".into(),
        mp.into(),
        "--foreground".into(),
        "--store".into(),
        store.into(),
        "--threads".into(),
        threads.to_string().into(),
        "--busy-poll".into(),
        busy_poll.to_string().into(),
        "--atime".into(),
        clap::ValueEnum::to_possible_value(atime)
            .expect("every value has a name")
            .get_name()
            .into(),
    ];
    if let Some(host) = host {
        argv.extend(["--host".into(), host.into()]);
    }
    if let Some(n) = max_open_per_caller {
        argv.extend(["--max-open-per-caller".into(), n.to_string().into()]);
    }
    if let Some(t) = attr_timeout {
        argv.extend(["--attr-timeout".into(), t.to_string().into()]);
    }
    for (on, flag) in [
        (no_passthrough, "--no-passthrough"),
        (no_io_uring, "--no-io-uring"),
        (no_audit, "--no-audit"),
        (trace_syscalls, "--trace-syscalls"),
        (no_search, "--no-search"),
        (allow_tampered_system, "--allow-tampered-system"),
    ] {
        if *on {
            argv.push(flag.into());
        }
    }
    if let Some(addr) = metrics {
        argv.extend(["--metrics".into(), addr.to_string().into()]);
    }
    argv
}

fn start_background(args: &MountArgs, mp: &Path, store: &Store) -> Result<(), Failure> {
    let log_path = store.host_dir_shown().join("daemon.log");
    // Beneath the store root, never through a symlink and only a regular file: in a store that
    // hosts share, another host's root could otherwise point this host's log (root's appends,
    // with text an agent chose) at any file of this machine. Read back for the daemon's last
    // words if it fails to start.
    let mut log = clawfs_store::beneath::open_file_mode(
        store.root_fd(),
        &store.host_rel().join("daemon.log"),
        rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CREATE | rustix::fs::OFlags::APPEND,
        0o600,
    )
    .map(std::fs::File::from)
    .with_context(|| {
        format!(
            "opening {} (a regular file, not a symlink)",
            log_path.display()
        )
    })?;
    let log_start = log.seek(SeekFrom::End(0)).unwrap_or(0);
    let exe = std::env::current_exe().context("locating the clawfs binary")?;
    let mut cmd = Command::new(exe);
    cmd.args(foreground_argv(args, mp, store.root()));
    cmd.stdin(Stdio::null())
        .stdout(log.try_clone().context("log file")?)
        .stderr(log.try_clone().context("log file")?);
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    // The mount at `mp` before the daemon's, if any: a later one is the daemon's.
    let before = mountinfo::mount_at(mp).ok().flatten().map(|m| m.dev);
    let mut child = cmd.spawn().context("starting the daemon")?;
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Some(status) = child.try_wait().context("waiting for the daemon")? {
            let mut text = String::new();
            let _ = log.seek(SeekFrom::Start(log_start));
            let _ = log.read_to_string(&mut text);
            let last = text
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("");
            return Err(Failure::Other(anyhow::anyhow!(
                "the daemon exited ({status}) before mounting: {last} (log: {})",
                log_path.display()
            )));
        }
        let mounted = mountinfo::clawfs_mount_at(mp).ok().flatten().is_some();
        let ready = store.daemon_info().is_some_and(|d| d.pid == child.id());
        if mounted && ready {
            println!(
                "ClawFS mounted at {} (store {}, pid {}, log {})",
                mp.display(),
                store.root().display(),
                child.id(),
                log_path.display()
            );
            return Ok(());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            // Whatever it mounted is served by no one now: detach it rather than leave a mount
            // whose every access fails.
            let now = mountinfo::mount_at(mp).ok().flatten();
            if now.is_some_and(|m| Some(m.dev) != before && m.fstype.starts_with("fuse")) {
                let _ = unmount(mp, true);
            }
            return Err(Failure::Other(anyhow::anyhow!(
                "the daemon did not mount within {}s (log: {})",
                START_TIMEOUT.as_secs(),
                log_path.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn serve(args: &MountArgs, mp: &Path, store: Store) -> Result<(), Failure> {
    let _lock = store.lock()?;
    for (path, old, new) in store.close_to_others()?.changed {
        warn!(path = %path.display(), "store mode {old:04o} -> {new:04o}: reached only through the mount");
    }
    // Modes of new files come from the caller's request, already masked by the kernel.
    // SAFETY: umask has no preconditions.
    unsafe { libc::umask(0) };
    let store_root = store.root().to_path_buf();
    // A new build may serve new tools: their definitions are files under tools/. The registry
    // names this mount.
    match clawfs_core::seed::write_tool_registry(&store_root, mp) {
        Ok(()) => {}
        // A damaged registry stays as it is, for the admin to see: tools/ then serves none of
        // its files (EIO, audited at each read) and the rest of the store is served.
        Err(e @ clawfs_integrity::IntegrityError::Json { .. }) => {
            warn!(error = %e, "the tool registry is damaged: tools/ serves none of its files until it is repaired");
        }
        Err(e) => {
            return Err(anyhow::Error::new(e)
                .context("writing the tool registry")
                .into())
        }
    }
    // Checked again by the daemon itself: a foreground mount has only this check, and the
    // allowance is recorded on the audit trail below.
    let tampered = check_system(&store, args.allow_tampered_system)?;
    let audit = if args.no_audit {
        warn!("the audit trail is off (--no-audit)");
        None
    } else {
        let audit = AuditLog::builder(store.audit_dir())
            .with_agent_logs(store_root.join("agents"))
            .open()
            .context("opening the audit trail")?;
        Some(Arc::new(audit))
    };
    if let Some(differences) = tampered {
        warn!(%differences, "serving a store whose system/ differs from its manifest (--allow-tampered-system)");
        if let Some(log) = &audit {
            log.record(
                clawfs_audit::AuditEvent::new("root", std::process::id(), "mount", "/system")
                    .reason(format!("--allow-tampered-system: {differences}")),
            );
        }
    }
    // A wrong search.toml stops the mount before it happens: indexing with another embedder
    // than the one asked for would re-embed every workspace.
    let embedder = (!args.no_search)
        .then(|| clawfs_search::EmbedderChoice::for_store(&store_root))
        .transpose()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let indexer = match embedder {
        None => {
            warn!("workspace indexing is off (--no-search)");
            None
        }
        Some(embedder) => {
            // In a store that hosts share, one host at a time writes each index.
            let leases = match store.host().filter(|_| store.is_shared()) {
                None => None,
                Some(h) => {
                    let cache = clawfs_core::hosts::cache_dir(&store_root, h).map_err(|e| {
                        anyhow::anyhow!(
                            "preparing this host's cache folder (CLAWFS_CACHE_DIR): {e}"
                        )
                    })?;
                    Some(
                        clawfs_search::Leases::new(h.as_str(), &store_root, &cache)
                            .context("opening the store's index folders")?,
                    )
                }
            };
            let ix = clawfs_search::Indexer::with_leases(&store_root, embedder, true, leases)
                .map_err(|e| anyhow::anyhow!("starting the indexer: {e}"))?;
            // Changes made while unmounted, or behind the daemon's back.
            if let Err(e) = ix.rescan_all() {
                warn!(error = %e, "queueing the workspaces for indexing");
            }
            Some(ix)
        }
    };
    // The kernel learns of changes made behind its back through the session, which needs the
    // filesystem first: the filesystem is built with the sending end, the session drains it.
    let (invalidations, invalidation_queue) = invalidation_channel();
    let activity = ActivityLink::default();
    let shared = store.is_shared();
    // Every open file and folder of the mount holds a descriptor here.
    let nofile = clawfs_core::descriptors::raise_nofile();
    let descriptors =
        clawfs_core::descriptors::DescriptorLimits::for_nofile(nofile, args.max_open_per_caller);
    tracing::info!(
        nofile,
        callers = descriptors.callers,
        others = descriptors.others,
        per_caller = descriptors.per_caller,
        "descriptors"
    );
    let mut builder = ClawFs::builder(store)
        .atime(atime(args.atime))
        .cache_ttl(Duration::from_secs_f64(
            args.attr_timeout
                .unwrap_or(match shared {
                    true => SHARED_ATTR_TIMEOUT,
                    false => ATTR_TIMEOUT,
                })
                .clamp(0.0, 3600.0),
        ))
        .mountpoint(mp.to_path_buf())
        .tool_slots(usize::from(args.threads).saturating_sub(1))
        .descriptor_limits(descriptors)
        .invalidations(invalidations)
        .activity(activity.clone());
    if let Some(audit) = &audit {
        builder = builder.audit(Arc::clone(audit));
    }
    if let Some(ix) = &indexer {
        builder = builder.indexer(Arc::clone(ix));
    }
    let fs = Arc::new(builder.build().context("opening the store root")?);
    let adapter = Adapter::new(
        Arc::clone(&fs),
        AdapterConfig {
            passthrough: !args.no_passthrough,
        },
    );
    let mut options = vec![
        MountOption::FSName(store_root.display().to_string()),
        MountOption::Subtype("clawfs".into()),
        MountOption::DefaultPermissions,
        // Agents' files never grant privileges or reach devices.
        MountOption::NoSuid,
        MountOption::NoDev,
    ];
    if args.atime == clawfs_args::mount::AtimeArg::Noatime {
        options.push(MountOption::NoAtime);
    }
    if which("fusermount3") {
        // A SIGKILLed daemon then leaves no "Transport endpoint is not connected" behind.
        options.push(MountOption::AutoUnmount);
    }
    let mut config = Config::default();
    config.mount_options = options;
    config.acl = SessionACL::All;
    config.n_threads = Some(args.threads as usize);
    config.clone_fd = true;
    config.busy_poll =
        (args.busy_poll > 0).then(|| std::time::Duration::from_micros(u64::from(args.busy_poll)));
    // A store hosts share lives on a network file system, where any request may wait on the
    // network: /dev/fuse's workers keep one from holding up the others of its CPU.
    config.io_uring = !args.no_io_uring && !shared;

    let session = fuser::Session::new(adapter, mp, &config)
        .with_context(|| format!("mounting {}", mp.display()))?;
    spawn_notifier(session.notifier(), invalidation_queue)?;
    // Agent execs (and with --trace-syscalls opens, connects and kernel refusals) on the audit
    // trail (not with --no-audit); started before the daemon reports ready, so runs after
    // `clawfs mount` are seen.
    let coverage = match args.trace_syscalls {
        true => clawfs_ebpf::Coverage::Syscalls,
        false => clawfs_ebpf::Coverage::Exec,
    };
    let agent_events = audit
        .is_some()
        .then(|| {
            AgentEvents::start(
                Arc::new(Recorder(Arc::clone(&fs))),
                &store_root,
                mp,
                coverage,
            )
        })
        .flatten()
        .map(Arc::new);
    // Held for as long as the session: the filesystem keeps only a weak reference.
    let _monitor = agent_events.clone().map(|events| {
        let monitor: Arc<dyn ActivityMonitor> = Arc::new(Monitor(events));
        activity.attach(Arc::downgrade(&monitor));
        monitor
    });
    let reopened = open_store(&store_root, args.host.as_deref())?;
    let daemon = DaemonInfo {
        pid: std::process::id(),
        mountpoint: mp.to_path_buf(),
        version: clawfs_core::VERSION.into(),
        started_at: clawfs_store::clock::now_rfc3339(),
        passthrough: !args.no_passthrough,
        host: None,
        machine: None,
        boot_id: None,
        renewed_at: None,
    };
    reopened.write_daemon_info(&daemon)?;
    info!(mountpoint = %mp.display(), store = %store_root.display(), host = ?reopened.host(), "mounted");
    spawn_signal_handler(mp.to_path_buf(), Arc::clone(&fs))?;
    let reopened = Arc::new(reopened);
    let shared = reopened
        .is_shared()
        .then(|| SharedWatch::new(Arc::clone(&reopened), daemon));
    // Held for as long as the session.
    let _metrics = match args.metrics {
        None => None,
        Some(addr) => {
            let sampled = Arc::clone(&fs);
            let server = clawfs_metrics::serve(addr, clawfs_metrics::enable(), move |m| {
                sampled.sample_metrics(m)
            })
            .with_context(|| format!("serving metrics at {addr}"))?;
            info!(addr = %server.addr().map_or(addr, |a| a), "metrics at /metrics");
            Some(server)
        }
    };
    spawn_vault_watch(Arc::clone(&fs), agent_events.clone(), shared)?;
    let result = session.run();
    if let Some(events) = &agent_events {
        events.stop();
    }
    if let Some(ix) = &indexer {
        ix.stop();
    }
    fs.save_usage_at_stop();
    fs.save_handles_at_stop();
    if let Some(audit) = fs.audit_log() {
        // Ends a signed stretch with its `audit:hmac-off` and checkpoint, then flushes.
        if let Err(e) = audit.close() {
            warn!(error = %e, "flushing the audit trail");
        }
    }
    reopened.clear_daemon_info();
    info!(mountpoint = %mp.display(), "unmounted");
    result.with_context(|| format!("serving {}", mp.display()))?;
    Ok(())
}

/// Seconds the kernel may cache names and attributes, by default.
const ATTR_TIMEOUT: f64 = 10.0;
/// The same in a store that hosts share: another host's change shows after this long.
const SHARED_ATTR_TIMEOUT: f64 = 1.0;

/// Written in the store's private folder each time the daemon has taken SIGUSR1 in
/// (`pid count`): [`refresh_daemon`] waits for it to change.
pub const REFRESHED_FILE: &str = "refreshed";

/// Tells the daemon serving `store`, if any, that workspaces changed in the store behind its
/// back (SIGUSR1): it drops the kernel's cached entries of every workspace folder and compares
/// every workspace with its index. Returns once it has (at most 5 s), with the daemon's pid.
pub fn refresh_daemon(store: &Store) -> Result<Option<u32>, Failure> {
    let Some(d) = store.serving_daemon() else {
        return Ok(None);
    };
    let ack = || store.read_host_file(REFRESHED_FILE, 4096);
    let before = ack();
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(d.pid as i32).ok_or_else(|| anyhow::anyhow!("bad pid"))?,
        rustix::process::Signal::USR1,
    )
    .with_context(|| format!("signalling the daemon (pid {})", d.pid))?;
    let deadline = Instant::now() + Duration::from_secs(5);
    while ack() == before {
        if Instant::now() > deadline {
            warn!(
                pid = d.pid,
                "the daemon did not acknowledge SIGUSR1 within 5 s"
            );
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(Some(d.pid))
}

/// SIGTERM and SIGINT unmount cleanly, which ends the session loop; SIGHUP reloads the policy
/// (an invalid one is refused and the old one stays) and reports in `.clawfs/policy-status.json`.
fn spawn_signal_handler(mp: PathBuf, fs: Arc<ClawFs>) -> Result<(), Failure> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP, SIGUSR1])
        .context("installing signal handlers")?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let mut refreshed = 0u64;
            for sig in signals.forever() {
                // This host's folder, by the descriptor the filesystem's store keeps.
                let private = fs.store().host_dir();
                if sig == SIGHUP {
                    reload_policy(&fs, &private);
                    fs.rescan_if_asked();
                    continue;
                }
                if sig == SIGUSR1 {
                    // `clawfs index rebuild`, `snapshot restore`, `workspace fork`: workspaces
                    // changed in the store; forget their cached entries and compare every one
                    // with its index.
                    fs.workspaces_replaced();
                    // Files came and went behind the daemon's back: what owners hold is
                    // counted again before the sender is told.
                    if let Err(e) = fs.rescan_usage(&mut |_| {}) {
                        warn!(error = %e, "recounting what owners hold");
                    }
                    if let Some(ix) = fs.indexer() {
                        info!("re-indexing every workspace (SIGUSR1)");
                        let _ = ix.rescan_all();
                    }
                    refreshed += 1;
                    // The sender waits for this: the mount shows the new folders from now on.
                    if let Err(e) = clawfs_store::atomic::atomic_write(
                        &private,
                        REFRESHED_FILE,
                        format!("{} {refreshed}\n", std::process::id()).as_bytes(),
                        0o600,
                    ) {
                        warn!(error = %e, "acknowledging SIGUSR1");
                    }
                    continue;
                }
                info!(signal = sig, "unmounting on signal");
                if let Err(e) = unmount(&mp, false).or_else(|_| unmount(&mp, true)) {
                    warn!(error = %e, "unmount on signal failed");
                }
                break;
            }
        })
        .context("starting the signal thread")?;
    Ok(())
}

/// How often the daemon looks whether the vault was unlocked or locked (by `clawfs vault`).
const VAULT_WATCH: Duration = Duration::from_secs(2);

/// While the vault is unlocked the audit trail carries an HMAC keyed from it; the vault is
/// unlocked and locked by other processes, so the daemon looks every [`VAULT_WATCH`].
/// The same loop keeps the eBPF monitor's watched agent groups current.
fn spawn_vault_watch(
    fs: Arc<ClawFs>,
    agent_events: Option<Arc<AgentEvents>>,
    mut shared: Option<SharedWatch>,
) -> Result<(), Failure> {
    std::thread::Builder::new()
        .name("vault-watch".into())
        .spawn(move || {
            let mut was_unlocked = None;
            loop {
                if let Some(watch) = &mut shared {
                    watch.tick(&fs);
                }
                let unlocked = fs.refresh_audit_key();
                // The mount checked the seal if the vault was unlocked then; otherwise it is
                // checked as soon as the vault is.
                if unlocked && was_unlocked == Some(false) {
                    check_seal_at_unlock(&fs);
                }
                was_unlocked = Some(unlocked);
                // An emergency stop written while no signal reached this daemon still applies.
                fs.refresh_estop();
                // Quota usage survives a restart (saved when it changed); `clawfs quota rescan`
                // asks for a recount.
                fs.save_usage();
                fs.rescan_if_asked();
                if let Some(events) = &agent_events {
                    events.refresh();
                }
                std::thread::sleep(VAULT_WATCH);
            }
        })
        .context("starting the vault watch")?;
    Ok(())
}

/// What a daemon of a store that hosts share keeps up with, besides its own requests: no
/// signal and no inotify event crosses hosts, so it looks every [`VAULT_WATCH`].
struct SharedWatch {
    store: Arc<Store>,
    daemon: DaemonInfo,
    /// The policy file as last seen: (inode, size, change time in ns).
    policy: Option<(u64, u64, i128)>,
    /// The emergency stop last acted on.
    stop: Option<String>,
}

impl SharedWatch {
    fn new(store: Arc<Store>, daemon: DaemonInfo) -> Self {
        let policy = Self::policy_stamp(&store);
        let stop = Self::stop_id(&store);
        Self {
            store,
            daemon,
            policy,
            stop,
        }
    }

    fn policy_stamp(store: &Store) -> Option<(u64, u64, i128)> {
        let st = rustix::fs::statat(
            store.root_fd(),
            clawfs_core::fs::POLICY_FILE,
            rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
        )
        .ok()?;
        let ctime = i128::from(st.st_ctime) * 1_000_000_000 + i128::from(st.st_ctime_nsec);
        Some((st.st_ino, st.st_size as u64, ctime))
    }

    fn stop_id(store: &Store) -> Option<String> {
        crate::commands::estop::read_flag(store)
            .map(|f| f["id"].as_str().unwrap_or("?").to_string())
    }

    /// Renews the lease; reloads a policy another host changed; stops this host's agents for
    /// a stop recorded on another host (the host that records one stops its own).
    fn tick(&mut self, fs: &ClawFs) {
        if let Err(e) = self.store.write_daemon_info(&self.daemon) {
            warn!(error = %e, "renewing this host's lease");
        }
        let policy = Self::policy_stamp(&self.store);
        if policy != self.policy {
            self.policy = policy;
            info!("the policy file changed (on this host or another): reloading it");
            reload_policy(fs, &self.store.host_dir());
        }
        let flag = crate::commands::estop::read_flag(&self.store);
        let stop = flag
            .as_ref()
            .map(|f| f["id"].as_str().unwrap_or("?").to_string());
        if stop == self.stop {
            return;
        }
        self.stop = stop;
        let Some(flag) = flag else { return };
        fs.refresh_estop();
        let mine = self.store.host().map(|h| h.as_str());
        if flag["host"].as_str().is_some_and(|h| Some(h) == mine) {
            return;
        }
        let root = std::fs::canonicalize(self.store.root())
            .unwrap_or_else(|_| self.store.root().to_path_buf());
        std::thread::spawn(move || {
            let of_this_store = |run_pid: u32| {
                clawfs_sandbox::runs::store_of_run(run_pid).is_none_or(|s| s == root)
            };
            match clawfs_sandbox::cgroup::kill_agent_runs(
                crate::commands::estop::KILL_TIMEOUT,
                of_this_store,
            ) {
                Ok(killed) => {
                    for k in &killed {
                        warn!(agent = %k.agent, group = %k.group.display(), pids = ?k.pids, empty = k.empty, "emergency stop from another host: agent killed");
                    }
                }
                Err(e) => warn!(error = %e, "emergency stop from another host: killing agents"),
            }
        });
    }
}

/// How long an unlock's failing seal check waits before it checks again.
const SEAL_SETTLE: Duration = Duration::from_secs(3);

/// The vault was unlocked while the store is served: its seal of the system manifest is checked
/// now. If it does not hold (the manifest or a signed book was changed without the vault's
/// key while it was locked), agents are stopped as by `clawfs estop`, and the record says why.
/// A failing seal is checked once more after [`SEAL_SETTLE`]: `clawfs vault init` (and a
/// rotation) put the key in the keyring a moment before they seal the manifest with it.
fn check_seal_at_unlock(fs: &ClawFs) {
    use clawfs_integrity::{seal, system};
    let store = fs.store();
    let tampered = || match seal::verify(store.root(), store.vault_config(), store.root_fd()) {
        Ok((system::Verification::Tampered(d), seal::SealCheck::Checked)) => Some(d),
        Ok(_) => None,
        Err(e) => {
            warn!(error = %e, "checking the system manifest's seal");
            None
        }
    };
    if tampered().is_none() {
        return;
    }
    std::thread::sleep(SEAL_SETTLE);
    let Some(differences) = tampered() else {
        return;
    };
    let list = differences
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    let reason = format!(
        "the vault was unlocked and system/ or its sealed manifest does not hold: {list}; agents are stopped until an admin checks (`clawfs system verify`) and runs `clawfs estop --clear`"
    );
    tracing::error!("{reason}");
    if let Some(audit) = fs.audit_log() {
        audit.record(
            clawfs_audit::AuditEvent::new(
                "admin",
                0,
                "system:seal",
                format!("/{}", system::MANIFEST),
            )
            .failed(libc::EIO)
            .reason(reason.clone()),
        );
    }
    match crate::commands::estop::record(store, "clawfs daemon (system seal)", Some(&reason)) {
        Ok(_) => {
            fs.refresh_estop();
        }
        Err(e) => warn!(error = %e, "recording the emergency stop"),
    }
}

/// Swaps in the store's policy file, or keeps the old policy if it is invalid; either way the
/// outcome goes to `.clawfs/policy-status.json` for `clawfs policy reload`.
fn reload_policy(fs: &ClawFs, private: &Path) {
    // Each reload's status differs from the last, even two within a second: `apply_policy`
    // waits for the file to change.
    static RELOADS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seq = RELOADS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    let now = clawfs_store::clock::now_rfc3339();
    let status = match fs.reload_policy() {
        Ok(()) => {
            info!("policy reloaded");
            serde_json::json!({ "ok": true, "at": now, "reload": seq })
        }
        Err(errors) => {
            let errors: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
            warn!(?errors, "policy refused; the old one stays");
            serde_json::json!({ "ok": false, "errors": errors, "at": now, "reload": seq })
        }
    };
    if let Err(e) = clawfs_store::atomic::atomic_write(
        private,
        crate::commands::policy::POLICY_STATUS,
        status.to_string().as_bytes(),
        0o644,
    ) {
        warn!(error = %e, "writing the policy status");
    }
}

/// Kernel cache invalidations go through this thread, never from inside a callback, so a
/// notification that needs a directory lock held by a request in progress cannot deadlock
/// the request's own thread; the caller waits for its batch (`Invalidations::deliver`).
fn spawn_notifier(notifier: fuser::Notifier, queue: InvalidationQueue) -> Result<(), Failure> {
    std::thread::Builder::new()
        .name("notifier".into())
        .spawn(move || {
            while let Some((batch, done)) = queue.next() {
                for inv in batch {
                    clawfs_metrics::invalidation();
                    // ENOENT: the kernel had nothing cached, which is fine.
                    let _ = match &inv {
                        Invalidation::Entry { parent, name } => {
                            notifier.inval_entry(fuser::INodeNo(*parent), name)
                        }
                        Invalidation::Inode { ino } => {
                            notifier.inval_inode(fuser::INodeNo(*ino), 0, 0)
                        }
                        // A negative offset: attributes only, no page.
                        Invalidation::Attributes { ino } => {
                            notifier.inval_inode(fuser::INodeNo(*ino), -1, 0)
                        }
                    };
                }
                done();
            }
        })
        .context("starting the notifier thread")?;
    Ok(())
}

fn which(bin: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(bin).is_file()))
        .unwrap_or(false)
}

/// How the filesystem keeps access times, as `--atime` asks.
fn atime(a: AtimeArg) -> clawfs_core::fs::Atime {
    match a {
        AtimeArg::Relatime => clawfs_core::fs::Atime::Relatime,
        AtimeArg::Noatime => clawfs_core::fs::Atime::NoAtime,
        AtimeArg::Nodiratime => clawfs_core::fs::Atime::NoDirAtime,
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use clawfs_args::{Cli, Command};

    fn mount_args(argv: &[&str]) -> MountArgs {
        match Cli::parse_from(std::iter::once("clawfs").chain(argv.iter().copied())).command {
            Command::Mount(m) => m,
            other => panic!("not a mount: {other:?}"),
        }
    }

    /// The background daemon gets every option it was asked for.
    #[test]
    fn the_daemon_gets_every_mount_option() {
        let asked = mount_args(&[
            "mount",
            "/m",
            "--no-passthrough",
            "--threads",
            "3",
            "--no-audit",
            "--attr-timeout",
            "2.5",
            "--no-search",
            "--allow-tampered-system",
        ]);
        let argv = foreground_argv(&asked, Path::new("/m"), Path::new("/s"));
        let argv: Vec<&str> = argv.iter().map(|a| a.to_str().unwrap()).collect();
        let daemon = mount_args(&argv);
        assert!(daemon.foreground);
        assert_eq!(daemon.store.store.as_deref(), Some(Path::new("/s")));
        let strip = |m: &MountArgs| {
            format!(
                "{:?}",
                MountArgs {
                    foreground: false,
                    store: clawfs_args::StoreArg { store: None },
                    ..m.clone()
                }
            )
        };
        assert_eq!(strip(&daemon), strip(&asked));
    }
}
