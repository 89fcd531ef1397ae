//! Size limits and output caps, so a request cannot exhaust the daemon and a response fits a
//! model's context window. Every cap is reported: a capped result says `"truncated": true`.

use serde::Serialize;

/// Limits the daemon may tune per workspace.
#[derive(Debug, Clone, Serialize)]
pub struct Limits {
    /// Largest request accepted (bytes). Larger → `too_large`. Default 4 MiB.
    pub max_request_bytes: usize,
    /// Largest file an editing tool loads whole (bytes); larger → `too_large`. The reading
    /// tools (`read_file`, `read_range`, `head`, `tail`, `search`, `outline`, `info`) stream and
    /// work on files of any size. Default 32 MiB.
    pub max_text_file_bytes: u64,
    /// Backups kept per file, newest first (writing one more removes the oldest past it).
    /// Default 10.
    pub backups_kept: usize,
    /// Backups older than this many days are removed as the file's next one is written.
    /// Default 30.
    pub backup_max_age_days: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_request_bytes: 4 << 20,
            max_text_file_bytes: 32 << 20,
            backups_kept: 10,
            backup_max_age_days: 30,
        }
    }
}

/// `read_file`: default and largest `max_chars`.
pub const READ_FILE_DEFAULT_CHARS: usize = 20_000;
/// `read_file`, `read_range`, `head`, `tail`: the most characters one call returns.
pub const READ_MAX_CHARS: usize = 100_000;
/// `read_range`, `head`, `tail`: the most lines one call returns.
pub const READ_MAX_LINES: usize = 2_000;
/// `head`/`tail` default line count.
pub const HEAD_DEFAULT_LINES: usize = 50;
/// `outline`: default and largest `max_headings`.
pub const OUTLINE_DEFAULT: usize = 200;
/// `outline`: the most headings one call returns.
pub const OUTLINE_MAX: usize = 2_000;
/// `search`: default and largest `max_hits`.
pub const SEARCH_DEFAULT_HITS: usize = 20;
/// `search`: the most hits one call returns.
pub const SEARCH_MAX_HITS: usize = 500;
/// `search`, `search_files`: the most context lines on each side.
pub const MAX_CONTEXT: usize = 10;
/// A matching line longer than this is cut in search results (characters).
pub const MAX_LINE_CHARS: usize = 500;
/// `search_files`: default and largest `max_results`.
pub const SEARCH_FILES_DEFAULT: usize = 50;
/// `search_files`: the most results one call returns.
pub const SEARCH_FILES_MAX: usize = 500;
/// `search_files`, `list_files`, `resolve` by title: the most directory entries visited.
pub const MAX_WALK_ENTRIES: usize = 100_000;
/// `search_files`, `find_files`, `list_files`, `directory_tree`, `resolve` by title: the
/// deepest level a walk goes to; deeper entries are left out and the result says it was cut.
pub const MAX_WALK_DEPTH: usize = 64;
/// `search_files`: files larger than this are skipped (bytes).
pub const SEARCH_FILES_MAX_FILE_BYTES: u64 = 8 << 20;
/// `list_files`: default and largest `max_results`.
pub const LIST_DEFAULT: usize = 200;
/// `list_files`: the most entries one call returns.
pub const LIST_MAX: usize = 2_000;
/// `directory_tree`: default depth.
pub const TREE_DEFAULT_DEPTH: usize = 3;
/// `directory_tree`: largest depth.
pub const TREE_MAX_DEPTH: usize = 10;
/// `directory_tree`: the most entries one call returns.
pub const TREE_MAX_ENTRIES: usize = 1_000;
/// `read_multiple_files`: the most paths in one call.
pub const MULTI_MAX_FILES: usize = 20;
/// `read_multiple_files`: default total characters over all files.
pub const MULTI_DEFAULT_CHARS: usize = 50_000;
/// `resolve` by title, `multiple_matches`: the most candidates listed.
pub const MAX_CANDIDATES: usize = 20;
/// `edit_file`, `apply_patch`: the most characters of diff returned.
pub const MAX_DIFF_CHARS: usize = 20_000;
/// `list_trash`: the most entries one call returns.
pub const TRASH_LIST_MAX: usize = 200;
/// Symlinks followed while resolving one path.
pub const MAX_SYMLINK_HOPS: usize = 40;
/// `read_media_file`: the largest file returned (bytes; about a third more as base64).
pub const MEDIA_MAX_BYTES: u64 = 8 << 20;
/// Bytes inspected for NUL to call a file binary.
pub const BINARY_SNIFF_BYTES: usize = 8_192;
