//! Extended attributes: only the `user.` namespace is stored (as real xattrs on the backing
//! file); `user.clawfs.*` names are ClawFS's own and are validated.

use crate::error::{FsError, FsResult};
use clawfs_store::area::Place;

/// Prefix of ClawFS's own attributes.
pub const CLAWFS_PREFIX: &str = "user.clawfs.";
/// The vector dimension of a workspace's index (P1.4 §7.2).
pub const VECTOR_DIMENSION: &str = "user.clawfs.vector_dimension";

/// Whether `name` is in the namespace ClawFS stores.
pub fn is_user(name: &str) -> bool {
    name.starts_with("user.") && name.len() > "user.".len()
}

/// What setting a ClawFS attribute means, once validated.
#[derive(Debug, PartialEq, Eq)]
pub enum ClawfsAttr {
    /// A workspace's vector dimension.
    VectorDimension(u32),
}

/// Validates a `user.clawfs.*` assignment on a node at `place`.
pub fn parse_clawfs(place: Place, name: &str, value: &[u8]) -> FsResult<ClawfsAttr> {
    let bad = |reason: String| FsError::InvalidXattr {
        name: name.to_string(),
        reason,
    };
    match name {
        VECTOR_DIMENSION => {
            if place != Place::WorkspaceRoot {
                return Err(bad("applies to a workspace directory only".into()));
            }
            let text = std::str::from_utf8(value).map_err(|_| bad("not UTF-8".into()))?;
            let dim: u32 = text
                .trim()
                .parse()
                .map_err(|_| bad(format!("{text:?} is not a whole number")))?;
            if !clawfs_search::VECTOR_DIMENSION_RANGE.contains(&dim) {
                return Err(bad(format!("{dim} is outside 128..=4096")));
            }
            Ok(ClawfsAttr::VectorDimension(dim))
        }
        _ => Err(bad("unknown ClawFS attribute".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clawfs_store::area::Area;

    #[test]
    fn vector_dimension_rules() {
        let ws = Place::WorkspaceRoot;
        assert_eq!(
            parse_clawfs(ws, VECTOR_DIMENSION, b"1536").unwrap(),
            ClawfsAttr::VectorDimension(1536)
        );
        for bad in [&b"127"[..], b"4097", b"abc", b"", b"\xff"] {
            assert!(parse_clawfs(ws, VECTOR_DIMENSION, bad).is_err());
        }
        let file = Place::Inside(Area::Workspaces);
        assert!(parse_clawfs(file, VECTOR_DIMENSION, b"512").is_err());
        assert!(parse_clawfs(ws, "user.clawfs.other", b"1").is_err());
        assert!(is_user("user.topic") && !is_user("user.") && !is_user("trusted.x"));
    }
}
