//! A tool definition's `capabilities`, read: the workspace folders it is to be given and the
//! hosts it may connect to. Anything else is refused, so a tool never runs with less than it
//! declared, nor with anything it did not.

use crate::Access;

/// The workspaces' folder, as capabilities name it.
pub const WORKSPACES: &str = "/clawfs/workspaces/";

/// What a definition's capabilities ask for.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Capabilities {
    /// Folders, each once, with the most access asked for it.
    pub folders: Vec<Folder>,
    /// `(host, port)` destinations; no port: any.
    pub outbound: Vec<(String, Option<u16>)>,
}

/// A workspace folder a tool is to be given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Folder {
    /// Its path under the workspaces' folder (`notes` or `notes/drafts`): plain names only.
    pub rel: String,
    /// What the tool may do in it.
    pub access: Access,
}

impl Folder {
    /// Its path in the namespace and for the tool: `/workspaces/<rel>`.
    pub fn guest(&self) -> String {
        format!("/workspaces/{}", self.rel)
    }
}

impl Capabilities {
    /// Reads `caps` (`filesystem:read:/clawfs/workspaces/W[/…]`, `filesystem:write:…`,
    /// `network:outbound:HOST[:PORT]`); the error names the first it cannot give.
    pub fn parse<S: AsRef<str>>(caps: &[S]) -> Result<Self, String> {
        let mut out = Capabilities::default();
        for cap in caps {
            let cap = cap.as_ref();
            let refuse = |why: &str| format!("capability {cap:?}: {why}");
            let mut parts = cap.splitn(3, ':');
            match (parts.next(), parts.next(), parts.next()) {
                (Some("filesystem"), Some(how @ ("read" | "write")), Some(path)) => {
                    let rel = path
                        .strip_prefix(WORKSPACES)
                        .map(|r| r.trim_end_matches('/'))
                        .filter(|r| !r.is_empty())
                        .ok_or_else(|| {
                            refuse(&format!("only folders under {WORKSPACES} can be given"))
                        })?;
                    if rel
                        .split('/')
                        .any(|c| c.is_empty() || c == "." || c == "..")
                    {
                        return Err(refuse("the path must be plain names"));
                    }
                    let access = match how {
                        "read" => Access::Read,
                        _ => Access::ReadWrite,
                    };
                    match out.folders.iter_mut().find(|f| f.rel == rel) {
                        Some(f) if access == Access::ReadWrite => f.access = access,
                        Some(_) => {}
                        None => out.folders.push(Folder {
                            rel: rel.to_string(),
                            access,
                        }),
                    }
                }
                (Some("network"), Some("outbound"), Some(dest)) => {
                    let (host, port) = match dest.rsplit_once(':') {
                        // `[v6]:port` or `host:port`; a bare IPv6 address has no port.
                        Some((h, p)) if h.starts_with('[') || !h.contains(':') => (
                            h.trim_start_matches('[').trim_end_matches(']'),
                            Some(p.parse::<u16>().map_err(|_| refuse("not a port"))?),
                        ),
                        _ => (dest.trim_start_matches('[').trim_end_matches(']'), None),
                    };
                    if host.is_empty() {
                        return Err(refuse("no host"));
                    }
                    out.outbound.push((host.to_string(), port));
                }
                _ => return Err(refuse("not a capability this runtime gives")),
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_are_read_or_refused() {
        let c = Capabilities::parse(&[
            "filesystem:read:/clawfs/workspaces/notes",
            "filesystem:write:/clawfs/workspaces/notes/",
            "filesystem:read:/clawfs/workspaces/docs/sub",
            "network:outbound:api.example.com:443",
            "network:outbound:[::1]:8080",
            "network:outbound:10.0.0.1",
        ])
        .unwrap();
        assert_eq!(
            c.folders,
            vec![
                Folder {
                    rel: "notes".into(),
                    access: Access::ReadWrite
                },
                Folder {
                    rel: "docs/sub".into(),
                    access: Access::Read
                }
            ]
        );
        assert_eq!(
            c.outbound,
            vec![
                ("api.example.com".into(), Some(443)),
                ("::1".into(), Some(8080)),
                ("10.0.0.1".into(), None)
            ]
        );
        for bad in [
            "filesystem:read:/etc",
            "filesystem:read:/clawfs/workspaces/",
            "filesystem:read:/clawfs/workspaces/a/../b",
            "filesystem:exec:/clawfs/workspaces/a",
            "network:outbound:host:http",
            "network:inbound:host:80",
            "process:spawn",
            "",
        ] {
            assert!(Capabilities::parse(&[bad]).is_err(), "{bad}");
        }
    }
}
