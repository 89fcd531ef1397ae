//! The tool table: every tool's name, argument and result types, and description, from which the
//! dispatcher and the registry are both generated, so they cannot disagree.

mod backups;
mod discover;
mod edit;
mod manage;
mod media;
mod read;
mod semantic;
mod walk;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::error::{ToolError, ToolResult};
use crate::ToolRoot;

/// What kind of entry a path is.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum EntryType {
    /// A regular file.
    File,
    /// A directory.
    Folder,
    /// A symbolic link (listed, never followed by listings).
    Symlink,
    /// Anything else (socket, fifo, device).
    Other,
}

impl EntryType {
    pub(crate) fn of(meta: &std::fs::Metadata) -> EntryType {
        let t = meta.file_type();
        if t.is_file() {
            EntryType::File
        } else if t.is_dir() {
            EntryType::Folder
        } else if t.is_symlink() {
            EntryType::Symlink
        } else {
            EntryType::Other
        }
    }
}

/// The tools an MCP client is shown by default: one per need (reading, finding, editing,
/// managing). The others do what these do in other shapes, and stay callable.
pub const LEAN_TOOLS: &[&str] = &[
    "read_file",
    "read_media_file",
    "info",
    "search_files",
    "find_files",
    "list_files",
    "semantic_search",
    "edit_file",
    "apply_patch",
    "write_file",
    "create_folder",
    "move",
    "delete",
    "restore",
    "list_allowed",
];

/// The tools that change the workspace: `(name, destructive, idempotent)` in MCP's sense (a
/// destructive one may change or remove what is there; an idempotent one called again with the
/// same arguments changes nothing more). Every other tool only reads.
const CHANGING: &[(&str, bool, bool)] = &[
    ("apply_patch", true, false),
    ("edit_exact", true, false),
    ("write_file", true, true),
    ("edit_file", true, false),
    ("move", false, false),
    ("delete", true, false),
    ("restore", false, false),
    ("empty_trash", true, true),
    ("create_folder", false, true),
    ("restore_backup", true, false),
];

/// MCP's tool annotations of `tool`: whether it only reads, may destroy, may be repeated
/// harmlessly; none reaches outside the workspace (`openWorldHint` false).
pub(crate) fn annotations(tool: &str) -> Value {
    let (read_only, destructive, idempotent) = match CHANGING.iter().find(|c| c.0 == tool) {
        Some(&(_, destructive, idempotent)) => (false, destructive, idempotent),
        None => (true, false, true),
    };
    serde_json::json!({
        "readOnlyHint": read_only,
        "destructiveHint": destructive,
        "idempotentHint": idempotent,
        "openWorldHint": false,
    })
}

/// Whether `tool` takes a `max_chars` argument (its schema, read once).
fn takes_max_chars(tool: &str) -> bool {
    static TAKING: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    TAKING
        .get_or_init(|| {
            TOOL_NAMES
                .iter()
                .copied()
                .filter(|t| {
                    schemas(t)
                        .is_some_and(|(_, args, _)| args["properties"].get("max_chars").is_some())
                })
                .collect()
        })
        .contains(&tool)
}

/// Parses a tool's arguments strictly (unknown fields refused, so typos surface).
fn parse_args<T: DeserializeOwned>(tool: &str, mut args: Value) -> ToolResult<T> {
    if let Value::Object(m) = &mut args {
        // The two-file interface names the tool inside the request.
        match m.remove("tool") {
            None => {}
            Some(Value::String(t)) if t == tool => {}
            Some(other) => {
                return Err(ToolError::InvalidArgs(format!(
                    "the request says \"tool\": {other} but was sent to '{tool}'; remove \"tool\" or make it match."
                )))
            }
        }
    }
    serde_json::from_value(args).map_err(|e| {
        ToolError::InvalidArgs(format!(
            "{tool}: {e}. See definitions/tool-{tool}.json for its arguments."
        ))
    })
}

fn to_value<T: Serialize>(r: T) -> ToolResult<Value> {
    serde_json::to_value(r).map_err(|e| ToolError::Io {
        context: "encoding the result".into(),
        source: std::io::Error::other(e),
    })
}

macro_rules! tool_table {
    ($( $name:literal => $func:path, $args:ty, $res:ty, $desc:literal; )*) => {
        /// Every tool name, in registry order.
        pub const TOOL_NAMES: &[&str] = &[$($name),*];

        /// Parses the arguments and runs the tool.
        pub(crate) fn dispatch(root: &ToolRoot, tool: &str, args: Value) -> ToolResult<Value> {
            match tool {
                $( $name => {
                    let budget = crate::budget::of_request(&args);
                    let a: $args = parse_args($name, args)?;
                    let r: $res = $func(root, a)?;
                    let mut answer = to_value(r)?;
                    // Media is bytes, as much as the tool's own limit lets through.
                    if $name != "read_media_file" {
                        crate::budget::bound(&mut answer, budget, takes_max_chars($name));
                    }
                    Ok(answer)
                } )*
                _ => Err(ToolError::UnknownTool {
                    name: tool.chars().take(64).collect(),
                    registry: root.registry_path(),
                }),
            }
        }

        /// `(description, argument schema, result schema)` of a tool.
        pub(crate) fn schemas(tool: &str) -> Option<(&'static str, Value, Value)> {
            match tool {
                $( $name => Some((
                    $desc,
                    crate::schema::schema_of::<$args>(),
                    crate::schema::output_schema_of::<$res>(),
                )), )*
                _ => None,
            }
        }
    };
}

tool_table! {
    "resolve" => read::resolve, read::ResolveArgs, read::ResolveResult,
        "Find a file by path (exact, then case-insensitive) or by title (file name, with or without .md; exact, then case-insensitive). Returns the path to use in the other tools; several matches give multiple_matches with candidates.";
    "info" => read::info, read::PathArgs, read::InfoResult,
        "Size, line count, sha256 and modification time of a file (size also as bytes). Use the sha256 as base_sha256 for apply_patch. Read whole files only when lines <= 400; otherwise outline, search, then read_range.";
    "outline" => read::outline, read::OutlineArgs, read::OutlineResult,
        "The Markdown headings of a file with their line numbers and levels (headings inside code fences and front matter are skipped).";
    "search" => read::search, read::SearchArgs, read::SearchResult,
        "Search one file for a literal string (or a regex with regex=true); returns matching lines with line numbers and optional context lines.";
    "read_range" => read::read_range, read::RangeArgs, read::RangeResult,
        "Lines start..end (1-based, inclusive) of a file, as content, with the file's sha256. At most 2000 lines / 100000 characters per call; next_start tells where to continue.";
    "head" => read::head, read::HeadArgs, read::RangeResult,
        "The first lines of a file (default 50).";
    "tail" => read::tail, read::HeadArgs, read::RangeResult,
        "The last lines of a file (default 50).";
    "apply_patch" => edit::apply_patch, edit::ApplyPatchArgs, edit::ApplyPatchResult,
        "Apply a unified diff to one file. base_sha256 (from info) must equal the file's current hash, else hash_mismatch with expected/actual. All hunks apply or none (patch_failed, file unchanged); context must match exactly but may have moved. Keeps a timestamped backup; returns the new sha256.";
    "edit_exact" => edit::edit_exact, edit::EditExactArgs, edit::EditExactResult,
        "Replace every occurrence of the exact text old with new. Refused when old occurs 0 times (not_found) or more than count times (multiple_matches with the lines). Optional base_sha256 guards against concurrent changes.";
    "read_file" => read::read_file, read::ReadFileArgs, read::ReadFileResult,
        "Read a text file, optionally lines start..end or only its first (head) or last (tail) lines; line numbers with line_numbers=true. Returns the file's sha256 (base_sha256 for apply_patch and edit_exact). Output is cut at max_chars (default 20000, at most 100000) on a line boundary, with a note saying how to read on.";
    "read_media_file" => media::read_media_file, media::MediaArgs, media::MediaResult,
        "An image, audio or other binary file (at most 8 MiB) as base64 data with its MIME type (from the file's content, else its extension) and kind (image, audio, video, blob).";
    "read_multiple_files" => read::read_multiple_files, read::ReadMultipleArgs, read::ReadMultipleResult,
        "Read up to 20 files at once; max_chars (default 50000) is shared among them. A failing file gives an error entry, not a failed call.";
    "write_file" => edit::write_file, edit::WriteFileArgs, edit::WriteFileResult,
        "Create a file or overwrite it with content (an overwritten file is backed up first). Creates missing parent folders unless create_parents=false; refuses to overwrite when overwrite=false.";
    "edit_file" => edit::edit_file, edit::EditFileArgs, edit::EditFileResult,
        "Targeted edits: insert text after a line (line 0 = top), then search/replace edits in order (each old must occur exactly once unless replace_all). All or nothing. Returns a unified diff; dry_run shows the diff without writing.";
    "move" => manage::move_entry, manage::MoveArgs, manage::MoveResult,
        "Move or rename a file or folder to a new full path; creates missing parent folders. Refuses when the destination exists.";
    "delete" => manage::delete, manage::PathArgs, manage::DeleteResult,
        "Soft-delete a file or folder into the workspace trash. Recoverable with restore {trash_id}; list_trash shows the trash.";
    "restore" => manage::restore, manage::RestoreArgs, manage::RestoreResult,
        "Put a trashed item back at its original path (or at to). Refuses when that path exists.";
    "list_trash" => manage::list_trash, manage::ListTrashArgs, manage::ListTrashResult,
        "The items in the workspace trash, newest first, with their trash_id and original path.";
    "empty_trash" => manage::empty_trash, manage::EmptyTrashArgs, manage::EmptyTrashResult,
        "Remove trash entries for good (one by trash_id, else every entry you deleted), giving their space back to your quota. Cannot be undone.";
    "create_folder" => manage::create_folder, manage::PathArgs, manage::CreateFolderResult,
        "Create a folder and any missing parents. Succeeds with created=false if it already exists.";
    "get_file_info" => manage::get_file_info, manage::PathArgs, manage::FileInfoResult,
        "Created and modified dates, size, type and (for a text file) sha256 of a file or folder (a folder's size is the total of the files in it).";
    "semantic_search" => semantic::semantic_search, semantic::SemanticArgs, semantic::SemanticResult,
        "Search the whole workspace by meaning and words (hybrid: 0.7 · embedding similarity + 0.3 · BM25), or mode vector / text. Returns ranked chunks with path, line range, headings and snippet; read one with read_range. Only files you may read are searched. The index follows writes within a second.";
    "search_files" => discover::search_files, discover::SearchFilesArgs, discover::SearchFilesResult,
        "Search the text of the files under a folder: literal like search, or a regex with regex=true; include/exclude globs (case-insensitive), context lines and a result limit (default 50, at most 500). Binary files and files over 8 MiB are skipped. To find files by name, use find_files.";
    "find_files" => discover::find_files, discover::FindFilesArgs, discover::FindFilesResult,
        "Find files and folders by name below a folder: a glob when the pattern holds * or ? (\"*.md\", \"projects/**/*.txt\"), else plain text contained in the name, case-insensitive; exclude globs skip entries and whole folders. Results in path order, at most 2000.";
    "list_files" => discover::list_files, discover::ListFilesArgs, discover::ListFilesResult,
        "List a folder, newest first (or sort_by name or size), with type, size (a folder's is the total below it) and modification time. With glob (case-insensitive; a glob without '/' matches file names at any depth), lists matching entries below the folder.";
    "directory_tree" => discover::directory_tree, discover::TreeArgs, discover::TreeResult,
        "A folder's tree as nested JSON, to a depth (default 3, at most 10), at most 1000 entries; exclude globs leave out entries and whole folders.";
    "list_backups" => backups::list_backups, read::PathArgs, backups::ListBackupsResult,
        "The backups the editing tools kept of a file (each edit saves what it replaces), newest first, with when each was made; restore_backup puts one back.";
    "restore_backup" => backups::restore_backup, backups::RestoreBackupArgs, backups::RestoreBackupResult,
        "Put a backup from list_backups back as the file's content: an edit like the others (base_sha256 checked when given, and the content it replaces is backed up in turn).";
    "list_allowed" => discover::list_allowed, discover::NoArgs, discover::AllowedResult,
        "What you may read and write in this workspace, the protected names, the tools and the limits.";
}
