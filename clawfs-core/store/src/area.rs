//! The six roots of the namespace and where a node sits in it.

use std::ffi::OsStr;
use std::fmt;

/// One of the six top-level roots, or the mount root itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Area {
    /// The mount root: fixed, holds only the six areas.
    Root,
    /// `system/`: read-only for everyone through the mount.
    System,
    /// `agents/`: one directory per agent.
    Agents,
    /// `tools/`: tool registry and definitions.
    Tools,
    /// `workspaces/`: user files.
    Workspaces,
    /// `vault/`: secrets, 0700.
    Vault,
    /// `specs/`: frozen documents, read-only through the mount.
    Specs,
}

impl Area {
    /// The six areas in the order `ls` shows them.
    pub const ALL: [Area; 6] = [
        Area::Agents,
        Area::Specs,
        Area::System,
        Area::Tools,
        Area::Vault,
        Area::Workspaces,
    ];

    /// The directory name of an area (`""` for the mount root).
    pub fn dir_name(self) -> &'static str {
        match self {
            Area::Root => "",
            Area::System => "system",
            Area::Agents => "agents",
            Area::Tools => "tools",
            Area::Workspaces => "workspaces",
            Area::Vault => "vault",
            Area::Specs => "specs",
        }
    }

    /// The area a top-level name stands for, if any.
    pub fn from_dir_name(name: &OsStr) -> Option<Area> {
        Area::ALL
            .into_iter()
            .find(|a| OsStr::new(a.dir_name()) == name)
    }

    /// Areas nobody may change through the mount.
    pub fn is_read_only(self) -> bool {
        matches!(self, Area::System | Area::Specs)
    }

    /// Whether every file of the area is checked against a manifest or a signature before it
    /// is served (`system/`, `specs/`, `tools/`): such areas hold files and folders only.
    pub fn is_checked(self) -> bool {
        matches!(self, Area::System | Area::Specs | Area::Tools)
    }
}

impl fmt::Display for Area {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Area::Root => f.write_str("/"),
            other => write!(f, "{}/", other.dir_name()),
        }
    }
}

/// Where a directory sits, as far as ClawFS's own rules care. Derived from the parent's place
/// and the name at lookup time; the places that carry rules cannot be renamed, so it never goes
/// stale.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Place {
    /// The mount root.
    MountRoot,
    /// The top directory of an area (`workspaces/`, `agents/`, …).
    AreaRoot(Area),
    /// `workspaces/<name>/`.
    WorkspaceRoot,
    /// `workspaces/<name>/snapshots/`.
    SnapshotsDir,
    /// Anything in a snapshots folder: read-only through the mount (`clawfs snapshot` makes,
    /// restores and removes snapshots).
    Snapshot,
    /// `agents/<name>/`.
    AgentRoot,
    /// Anything else inside an area.
    Inside(Area),
}

/// The name of the search folder in every workspace (looked up, never listed).
pub const SEARCH_DIR: &str = ".search";

/// The name of the index view in every workspace (listed).
pub const INDEX_VIEW: &str = "workspace.db";

/// Names inside a workspace root that ClawFS manages and nobody creates, renames or removes:
/// the metadata and snapshots it keeps there, and the names of its generated search folder
/// and index view.
pub const WORKSPACE_MANAGED: [&str; 4] = ["metadata.json", "snapshots", SEARCH_DIR, INDEX_VIEW];

/// Names inside an agent's directory that ClawFS manages: `identity.json` changes only whole and
/// validated (a staged write), never by removing it and creating another file in its place.
pub const AGENT_MANAGED: [&str; 1] = ["identity.json"];

impl Place {
    /// The area this place belongs to.
    pub fn area(self) -> Area {
        match self {
            Place::MountRoot => Area::Root,
            Place::AreaRoot(a) | Place::Inside(a) => a,
            Place::WorkspaceRoot | Place::SnapshotsDir | Place::Snapshot => Area::Workspaces,
            Place::AgentRoot => Area::Agents,
        }
    }

    /// The place of the child `name` of a directory at `self`.
    pub fn child(self, name: &OsStr) -> Option<Place> {
        Some(match self {
            Place::MountRoot => Place::AreaRoot(Area::from_dir_name(name)?),
            Place::AreaRoot(Area::Workspaces) => Place::WorkspaceRoot,
            Place::AreaRoot(Area::Agents) => Place::AgentRoot,
            Place::WorkspaceRoot if name == "snapshots" => Place::SnapshotsDir,
            Place::SnapshotsDir | Place::Snapshot => Place::Snapshot,
            other => Place::Inside(other.area()),
        })
    }

    /// Whether nothing here may change through the mount: the read-only areas, and snapshots.
    pub fn is_read_only(self) -> bool {
        self.area().is_read_only() || matches!(self, Place::SnapshotsDir | Place::Snapshot)
    }

    /// Whether `name` inside a directory at `self` is managed by ClawFS (not renamed or removed).
    pub fn is_managed_child(self, name: &OsStr) -> bool {
        match self {
            Place::WorkspaceRoot => WORKSPACE_MANAGED.iter().any(|m| OsStr::new(m) == name),
            Place::AgentRoot => AGENT_MANAGED.iter().any(|m| OsStr::new(m) == name),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_follow_the_tree() {
        let ws = Place::MountRoot.child(OsStr::new("workspaces")).unwrap();
        assert_eq!(ws, Place::AreaRoot(Area::Workspaces));
        let def = ws.child(OsStr::new("default")).unwrap();
        assert_eq!(def, Place::WorkspaceRoot);
        assert_eq!(
            def.child(OsStr::new("snapshots")),
            Some(Place::SnapshotsDir)
        );
        assert_eq!(
            def.child(OsStr::new("notes")),
            Some(Place::Inside(Area::Workspaces))
        );
        let snaps = def.child(OsStr::new("snapshots")).unwrap();
        assert_eq!(snaps.child(OsStr::new("s.db")), Some(Place::Snapshot));
        assert!(snaps.is_read_only() && Place::Snapshot.is_read_only());
        assert!(!def.is_read_only());
        assert_eq!(Place::MountRoot.child(OsStr::new(".clawfs")), None);
        assert!(def.is_managed_child(OsStr::new("metadata.json")));
        assert!(!def.is_managed_child(OsStr::new("notes.md")));
    }
}
