//! The arguments of `clawfs specs`, `clawfs tools` and `clawfs system`.

use std::path::PathBuf;

use clap::Subcommand;

/// `clawfs specs` subcommands.
#[derive(Debug, Subcommand)]
pub enum SpecsCommand {
    /// Make a signing key for a new trusted signer: the private key goes into the vault (as
    /// the secret `signer-NAME`, so the vault must be unlocked), the public key into
    /// system/signers.json. The first signer also signs the frozen documents that have only a
    /// hash.
    Keygen {
        /// The signer's name (a-z, 0-9, '-').
        #[arg(long = "as", value_name = "SIGNER")]
        signer: String,
    },
    /// Add a document as a draft (served as long as its bytes match what was added).
    Add {
        /// The document.
        file: PathBuf,
        /// Its id (e.g. P1.9-example-spec).
        #[arg(long)]
        id: String,
        /// Where it goes, relative to specs/ (default: the file's name).
        #[arg(long)]
        path: Option<String>,
    },
    /// Freeze a draft: hash it and sign it as SIGNER (key from the vault).
    Freeze {
        /// The document's id.
        id: String,
        /// Who signs.
        #[arg(long = "as", value_name = "SIGNER")]
        signer: String,
    },
    /// Propose a new text for a frozen document; two different signers must approve it.
    Propose {
        /// The document's id.
        id: String,
        /// The new text.
        file: PathBuf,
    },
    /// Approve the proposed change of a document as SIGNER; the second different signer's
    /// approval freezes the new version and keeps the old one under specs/history/.
    Approve {
        /// The document's id.
        id: String,
        /// Who approves.
        #[arg(long = "as", value_name = "SIGNER")]
        signer: String,
    },
    /// Check every document: hash and signatures (public keys only, so the vault may be
    /// locked). Exit status 5 if any fails.
    Verify {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `clawfs tools` subcommands.
#[derive(Debug, Subcommand)]
pub enum ToolsCommand {
    /// Publish a tool: check its definition (P1.4 tool schema; named tool-NAME.json) and its
    /// WebAssembly binary (named NAME-vX.Y.Z.wasm), store both read-only under tools/, and
    /// record them in tools/registry.json signed by SIGNER. A published version never changes.
    Add {
        /// The definition, tool-NAME.json.
        definition: PathBuf,
        /// The binary, NAME-vX.Y.Z.wasm.
        binary: Option<PathBuf>,
        /// Who signs (key from the vault).
        #[arg(long = "as", value_name = "SIGNER")]
        signer: String,
    },
    /// Run a published WebAssembly tool as yourself: the request (JSON) from --input or stdin,
    /// the answer on stdout. The tool gets the folders of its `filesystem:` capabilities,
    /// opened through the mount with your rights (what you may not read, it may not read),
    /// and the hosts of its `network:outbound:` capabilities; nothing else. Its binary is read
    /// from the mount (which serves only what the signed registry lists) and checked against
    /// the registry's hash before it is compiled. Exit status: the tool's own; 1 if it could
    /// not run or was stopped by a limit (the reason on stderr).
    Run {
        /// The tool's id (newest version unless --version).
        tool_id: String,
        /// This version instead of the newest.
        #[arg(long, value_name = "X.Y.Z")]
        version: Option<String>,
        /// Where ClawFS is mounted.
        #[arg(long, value_name = "DIR", default_value = "/clawfs")]
        mount: PathBuf,
        /// Read the request from this file instead of stdin.
        #[arg(long, value_name = "FILE")]
        input: Option<PathBuf>,
    },
    /// List the published tools (the built-in agent tools are in tools/registry.json too).
    List {
        /// Print JSON Lines.
        #[arg(long)]
        json: bool,
    },
}

/// `clawfs system` subcommands.
#[derive(Debug, Subcommand)]
pub enum SystemCommand {
    /// Compare system/ with vault/system-manifest.json. Exit status 5 if they differ.
    Verify {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Install new system files and record their hashes in the manifest (nothing else is
    /// recorded: a change made behind ClawFS's back to another file stays a mismatch).
    Update {
        /// PATH=FILE: install FILE as system/PATH (e.g. cgroup/quotas.json=./quotas.json).
        #[arg(value_name = "PATH=FILE", required_unless_present_any = ["remove", "all"])]
        files: Vec<String>,
        /// Remove system/PATH and its entry.
        #[arg(long, value_name = "PATH")]
        remove: Vec<String>,
        /// Record every file of system/ as it is now (a store without a manifest, or changes
        /// an admin has checked and accepts).
        #[arg(long, conflicts_with_all = ["files", "remove"])]
        all: bool,
    },
    /// Seal vault/system-manifest.json with the vault's key (the vault must be unlocked), with
    /// the latest signed version of each document and tool: a manifest rewritten without the
    /// key, or a signed book rolled back, then refuses the mount. Every change made by ClawFS's
    /// commands seals again by itself; this seals a store that was never sealed, once system/
    /// matches its hashes.
    Seal,
}
