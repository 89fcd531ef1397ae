//! `read_media_file`: an image, audio or other binary file as base64 with its MIME type, for
//! harnesses that pass pictures and sound to a model.

use base64::Engine as _;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::access::Access;
use crate::error::{ToolError, ToolResult};
use crate::fsops::read_limited;
use crate::limits::MEDIA_MAX_BYTES;
use crate::paths::show;
use crate::ToolRoot;

/// `read_media_file` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MediaArgs {
    /// Workspace-relative path.
    pub path: String,
}

/// What kind of media a file holds, from its MIME type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum MediaKind {
    /// `image/*`.
    Image,
    /// `audio/*`.
    Audio,
    /// `video/*`.
    Video,
    /// Anything else.
    Blob,
}

/// `read_media_file` result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct MediaResult {
    /// The resolved path.
    pub path: String,
    /// The MIME type: from the file's first bytes when they are a known format, else from its
    /// extension, else `application/octet-stream`.
    pub mime_type: String,
    /// image, audio, video or blob.
    pub kind: MediaKind,
    /// Size in bytes.
    pub size: u64,
    /// The bytes, base64 (standard alphabet, padded).
    pub data: String,
}

/// The MIME type of `bytes` named `rel`: by content first, since an extension can lie.
fn mime_of(rel: &str, bytes: &[u8]) -> String {
    if let Some(t) = infer::get(bytes) {
        return t.mime_type().to_string();
    }
    mime_guess::from_path(rel)
        .first_raw()
        .unwrap_or("application/octet-stream")
        .to_string()
}

pub(crate) fn read_media_file(root: &ToolRoot, a: MediaArgs) -> ToolResult<MediaResult> {
    let f = root.existing_file(&a.path, Access::Read)?;
    if f.meta.len() > MEDIA_MAX_BYTES {
        return Err(ToolError::TooLarge(format!(
            "'{}' is {} bytes; read_media_file returns files of at most {MEDIA_MAX_BYTES} bytes. Use get_file_info for its size and type.",
            show(&f.rel),
            f.meta.len()
        )));
    }
    let bytes = read_limited(&f.file, &f.rel, MEDIA_MAX_BYTES)?;
    let mime_type = mime_of(&f.rel, &bytes);
    let kind = match mime_type.split('/').next() {
        Some("image") => MediaKind::Image,
        Some("audio") => MediaKind::Audio,
        Some("video") => MediaKind::Video,
        _ => MediaKind::Blob,
    };
    Ok(MediaResult {
        path: f.rel,
        size: bytes.len() as u64,
        data: base64::engine::general_purpose::STANDARD.encode(&bytes),
        mime_type,
        kind,
    })
}

#[cfg(test)]
mod tests {
    use super::mime_of;

    #[test]
    fn content_decides_over_the_extension() {
        let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";
        assert_eq!(mime_of("photo.jpg", png), "image/png");
        assert_eq!(mime_of("song.mp3", b"no magic here"), "audio/mpeg");
        assert_eq!(mime_of("noext", b"\x01\x02"), "application/octet-stream");
    }
}
