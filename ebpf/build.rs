//! Compiles the C eBPF programs of `src/bpf/` with clang (`-target bpf -O2 -g`) into `OUT_DIR`.
//!
//! A missing or failing clang must not break the workspace build: each object that cannot be built
//! is written empty and the reason is passed to the crate in `CLAWFS_EBPF_BUILD_ERROR`, which the
//! loader reports as "not available: ...".

use std::path::PathBuf;
use std::process::Command;

const PROGRAMS: [&str; 3] = ["monitor", "egress", "file_open_lsm"];

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let bpf_dir = manifest.join("src/bpf");
    println!("cargo:rerun-if-changed=src/bpf/common.h");
    println!("cargo:rerun-if-env-changed=CLANG");
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".to_string());
    // Debian puts <asm/types.h> under the multiarch include directory, which clang -target bpf
    // does not search.
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let (multiarch, target_arch) = match arch.as_str() {
        "x86_64" => ("x86_64-linux-gnu", "x86"),
        "aarch64" => ("aarch64-linux-gnu", "arm64"),
        "riscv64" => ("riscv64-linux-gnu", "riscv"),
        other => (other, other),
    };
    let mut errors = Vec::new();
    for name in PROGRAMS {
        let src = bpf_dir.join(format!("{name}.bpf.c"));
        let obj = out.join(format!("{name}.bpf.o"));
        println!("cargo:rerun-if-changed=src/bpf/{name}.bpf.c");
        let result = Command::new(&clang)
            .args(["-target", "bpf", "-O2", "-g", "-Wall", "-Werror"])
            .arg(format!("-D__TARGET_ARCH_{target_arch}"))
            .arg(format!("-I/usr/include/{multiarch}"))
            .arg("-I")
            .arg(&bpf_dir)
            .arg("-c")
            .arg(&src)
            .arg("-o")
            .arg(&obj)
            .output();
        let error = match result {
            Ok(o) if o.status.success() => None,
            Ok(o) => Some(format!(
                "{clang} failed on {name}.bpf.c: {}",
                String::from_utf8_lossy(&o.stderr)
                    .lines()
                    .take(5)
                    .collect::<Vec<_>>()
                    .join(" | ")
            )),
            Err(e) => Some(format!(
                "cannot run {clang} ({e}): install clang and libbpf-dev (scripts/packages.sh)"
            )),
        };
        if let Some(e) = error {
            println!("cargo:warning=clawfs-ebpf: {e}");
            std::fs::write(&obj, b"").expect("write empty object");
            errors.push(e);
        }
    }
    errors.dedup();
    let joined = errors.join("; ").replace(['\n', '\r'], " ");
    println!("cargo:rustc-env=CLAWFS_EBPF_BUILD_ERROR={joined}");
}
