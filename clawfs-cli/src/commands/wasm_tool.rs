//! `clawfs tools run`: runs a published WebAssembly tool as the invoking process, through the
//! mount. Everything the tool is given is reached through the mount with the invoker's rights,
//! so the daemon decides, audits and counts each of its file operations as the invoker's own:
//! a sandboxed agent's tool is that agent.

use std::io::{Read, Write};
use std::path::Path;

use anyhow::{anyhow, Context};
use clawfs_integrity::registry::{self, Package};
use clawfs_wasm::{Access, Call, Capabilities, Outbound, Preopen, Runtime, WasmError};

use crate::error::Failure;

/// The largest request, bytes.
const INPUT_LIMIT: u64 = 16 << 20;

/// Runs `tool_id` (its newest version, or `version`) with the request from `input` or stdin;
/// returns the tool's exit code.
pub fn run(
    mount: &Path,
    tool_id: &str,
    version: Option<&str>,
    input: Option<&Path>,
) -> Result<u8, Failure> {
    let package = find(mount, tool_id, version)?;
    let (Some(wasm_path), Some(_)) = (&package.wasm_path, &package.wasm_hash) else {
        return Err(anyhow!("{tool_id} {} has no WebAssembly binary", package.version).into());
    };
    let binary = mount.join("tools").join(wasm_path);
    // The mount serves a file of tools/ only if it is what the signed registry lists.
    let wasm = std::fs::read(&binary).map_err(|e| {
        Failure::Tampered(format!(
            "{}: {e} (the mount serves a tool only as the signed registry lists it)",
            binary.display()
        ))
    })?;
    let mut request = Vec::new();
    match input {
        Some(p) => std::fs::File::open(p)
            .with_context(|| format!("{}", p.display()))?
            .take(INPUT_LIMIT + 1)
            .read_to_end(&mut request),
        None => std::io::stdin()
            .lock()
            .take(INPUT_LIMIT + 1)
            .read_to_end(&mut request),
    }
    .context("reading the request")?;
    if request.len() as u64 > INPUT_LIMIT {
        return Err(anyhow!("the request is larger than {INPUT_LIMIT} bytes").into());
    }
    let (preopens, outbound) = capabilities(mount, &package)?;
    for p in &preopens {
        may_use(p).map_err(|e| {
            anyhow!(
                "{tool_id} {} needs {} {}, which you may not: {e} (not run)",
                package.version,
                match p.access {
                    Access::Read => "to read",
                    Access::ReadWrite => "to read and write",
                },
                p.guest
            )
        })?;
    }
    let runtime = Runtime::new().map_err(|e| anyhow!(e))?;
    let call = Call::of_package(&package, &wasm, &request, preopens, outbound)
        .ok_or_else(|| anyhow!("{tool_id} {} has no WebAssembly binary", package.version))?;
    let done = runtime.run(call);
    let done = match done {
        Ok(done) => done,
        Err(e @ WasmError::Tampered { .. }) => return Err(Failure::Tampered(e.to_string())),
        Err(e) => return Err(anyhow!("{tool_id} {}: {e}", package.version).into()),
    };
    let mut out = std::io::stdout().lock();
    out.write_all(&done.output)
        .and_then(|()| out.flush())
        .context("writing the answer")?;
    std::io::stderr().write_all(&done.stderr).ok();
    Ok(u8::try_from(done.exit_code).unwrap_or(1))
}

/// Whether the caller may do with `p`'s folder what the tool is to do there, asked of the
/// mount, which decides by the caller's policy and records a refusal: listing it for reading,
/// and the kernel's write check (which carries the policy's grants) for writing.
fn may_use(p: &Preopen) -> std::io::Result<()> {
    let own = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&p.dir));
    std::fs::read_dir(&own)?.next().transpose()?;
    if p.access == Access::ReadWrite {
        rustix::fs::access(own.as_str(), rustix::fs::Access::WRITE_OK)?;
    }
    Ok(())
}

/// The package `tool_id` (`version`, or the newest) of the registry the mount serves.
fn find(mount: &Path, tool_id: &str, version: Option<&str>) -> Result<Package, Failure> {
    let path = mount.join("tools").join(registry::REGISTRY);
    let bytes = std::fs::read(&path).with_context(|| format!("{}", path.display()))?;
    let v: serde_json::Value =
        serde_json::from_slice(&bytes).with_context(|| format!("{}", path.display()))?;
    let packages: Vec<Package> =
        serde_json::from_value(v.get("packages").cloned().unwrap_or_default())
            .with_context(|| format!("{}: packages", path.display()))?;
    packages
        .into_iter()
        .filter(|p| p.tool_id == tool_id && version.is_none_or(|v| p.version == v))
        .reduce(|a, b| {
            if registry::newer(&b.version, &a.version) {
                b
            } else {
                a
            }
        })
        .ok_or_else(|| {
            let which = version.map_or_else(String::new, |v| format!(" {v}"));
            anyhow!("no published tool {tool_id}{which} (`clawfs tools list`)").into()
        })
}

/// What the package's capabilities give it: folders (each through the mount) and hosts.
fn capabilities(mount: &Path, package: &Package) -> Result<(Vec<Preopen>, Vec<Outbound>), Failure> {
    let caps = Capabilities::parse(&package.capabilities)
        .map_err(|e| anyhow!("{} {}: {e}: not run", package.tool_id, package.version))?;
    let mut preopens = Vec::new();
    for f in &caps.folders {
        let rel = Path::new("workspaces").join(&f.rel);
        let dir = Preopen::beneath(mount, &rel, f.guest(), f.access).map_err(|e| {
            anyhow!(
                "{} {} needs {}, which could not be opened as you: {e} (it must be a folder, reached through folders only; not run)",
                package.tool_id,
                package.version,
                f.guest()
            )
        })?;
        preopens.push(dir);
    }
    let mut outbound = Vec::new();
    for (host, port) in &caps.outbound {
        outbound.extend(
            Outbound::resolve(host, *port)
                .map_err(|e| anyhow!("{} could not be resolved: {e}: not run", host))?,
        );
    }
    Ok((preopens, outbound))
}
