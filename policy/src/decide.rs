//! The decision: may this identity do this access at this namespace path? Pure functions of the
//! policy and their arguments, no I/O, so the FUSE adapter can call them on every request.

use super::{rule, Access, AgentName, AgentSpec, Denial, DenyKind, Grant, Identity, NsPath};
use super::{Policy, Quota, UsersMode};

/// The top-level names of the namespace.
const SYSTEM: &str = "system";
const SPECS: &str = "specs";
const TOOLS: &str = "tools";
const AGENTS: &str = "agents";
const WORKSPACES: &str = "workspaces";
const VAULT: &str = "vault";

/// A workspace's settings file, kept by ClawFS.
const WORKSPACE_METADATA: &str = "metadata.json";

/// The generated file that tells a caller who ClawFS thinks it is: `/agents/self`.
const SELF_FILE: &str = "self";

/// Git's directory, its hooks folder and config file, and the submodule file: compared in any
/// letter case. See [`git_guard`].
const GIT_DIR: &str = ".git";
const GIT_HOOKS: &str = "hooks";
const GIT_CONFIG: &str = "config";
/// What makes a folder a git directory to git (with `objects/` and `refs/`).
const GIT_HEAD: &str = "HEAD";
const GIT_CONFIG_WORKTREE: &str = "config.worktree";
const GIT_WORKTREES: &str = "worktrees";
const GIT_COMMONDIR: &str = "commondir";
const GIT_MODULES: &str = "modules";
const GITMODULES: &str = ".gitmodules";

/// What the git guard asks of the filesystem about a path it would otherwise refuse. git trusts a
/// repository only when whoever runs it owns it (`safe.directory`), so what an agent does in a
/// repository it owns can only reach itself; the guard protects repositories someone else owns
/// and will run git in.
pub trait GitRepos {
    /// Whether a `.git` the caller does not own is in the folder holding `path` or in a folder
    /// above it, up to its workspace or agent directory: git run there by its owner (or by a
    /// superproject's git recursing into a nested repository with `GIT_DIR` set, which skips
    /// the ownership check) would apply what the agent wrote.
    fn foreign_git_above(&self, path: &NsPath) -> bool;
    /// Whether the folder holding `path` holds a `.git`: `path` is at a repository's top.
    fn at_repo_top(&self, path: &NsPath) -> bool;
    /// Whether the caller (not root) owns the folder holding `path`: a bare repository made
    /// there is one git trusts for the caller alone.
    fn owns_folder(&self, path: &NsPath) -> bool;
    /// Whether the caller (not root) owns the file at `path`.
    fn owns_file(&self, path: &NsPath) -> bool;
    /// The folders holding `path` that are git dirs by what they hold (a `HEAD`), whatever
    /// their name — a bare repository, a `--separate-git-dir`, a mirror — as the index of
    /// their last component in `path`: git uses them as it uses a `.git`, so the guard keeps
    /// them as it keeps a `.git` (see [`Policy::check_in`]).
    fn git_dirs(&self, path: &NsPath) -> Vec<usize>;
}

/// Every repository is someone else's: the guard in full, for callers that cannot look.
pub struct EveryRepoForeign;

impl GitRepos for EveryRepoForeign {
    fn foreign_git_above(&self, _: &NsPath) -> bool {
        true
    }
    fn at_repo_top(&self, _: &NsPath) -> bool {
        true
    }
    fn owns_folder(&self, _: &NsPath) -> bool {
        false
    }
    // A lock file being written is taken for the caller's own: git writes one before every
    // checked rename, and whose it is cannot be looked at here.
    fn owns_file(&self, _: &NsPath) -> bool {
        true
    }
    // What a folder holds cannot be looked at here: only `.git` names are git dirs.
    fn git_dirs(&self, _: &NsPath) -> Vec<usize> {
        Vec::new()
    }
}

fn deny(rule: &'static str, kind: DenyKind, reason: String) -> Result<(), Denial> {
    Err(Denial::new(rule, kind, reason))
}

impl Policy {
    /// May `who` do `access` at `path`? Admins always may (POSIX applies below); ordinary users
    /// per the `users` mode; agents per the rules in `policy/README.md`. The first rule that
    /// refuses decides, protected names first.
    /// Every repository counts as someone else's (see [`Policy::check_in`]).
    pub fn check(&self, who: &Identity, access: Access, path: &NsPath) -> Result<(), Denial> {
        self.check_as(who, access, path, false, &EveryRepoForeign)
    }

    /// [`Policy::check`], with the git guard applied only where `git` finds a repository
    /// someone other than the caller owns.
    pub fn check_in(
        &self,
        who: &Identity,
        access: Access,
        path: &NsPath,
        git: &dyn GitRepos,
    ) -> Result<(), Denial> {
        self.check_as(who, access, path, false, git)
    }

    /// [`Policy::check`]; `renamed_onto`: `path` is the destination of a rename, which may make a
    /// git config (see [`Policy::is_git_config`]).
    pub(crate) fn check_as(
        &self,
        who: &Identity,
        access: Access,
        path: &NsPath,
        renamed_onto: bool,
        git: &dyn GitRepos,
    ) -> Result<(), Denial> {
        match who {
            Identity::Admin => Ok(()),
            Identity::User { .. } => self.check_user(access, path),
            Identity::Agent(name) => match self.agents.get(name) {
                Some(spec) => self.check_agent(spec, access, path, renamed_onto, git),
                None => deny(
                    rule::UNKNOWN_AGENT,
                    DenyKind::Access,
                    format!(
                        "agent {name} is not in the policy in force, so it may not {} {path}; ask an admin to add [agents.{name}] to the policy",
                        access.verb()
                    ),
                ),
            },
        }
    }

    /// A rename of `from` to `to` (or one half of an exchange: check both directions): the
    /// caller must be able to delete the source and create the destination, so nothing moves out
    /// of, or into, a place the caller may not write.
    ///
    /// With `.git` protected, an agent may not move anything onto or out of a `.git` name, nor
    /// onto `.git/hooks`, in a repository someone else owns: a move would bring in a whole
    /// prepared `hooks/` or `config` that was never written through the guarded paths (see
    /// [`git_guard`]).
    pub fn check_move(&self, who: &Identity, from: &NsPath, to: &NsPath) -> Result<(), Denial> {
        self.check_move_in(who, from, to, &EveryRepoForeign)
    }

    /// [`Policy::check_move`], with the git guard applied where `git` finds a repository
    /// someone other than the caller owns.
    pub fn check_move_in(
        &self,
        who: &Identity,
        from: &NsPath,
        to: &NsPath,
        git: &dyn GitRepos,
    ) -> Result<(), Denial> {
        if matches!(who, Identity::Agent(_)) && self.guards_git() {
            for (end, path) in [("from", from), ("onto", to)] {
                if let Some(what) = self
                    .git_move_target(path, git)
                    .filter(|_| git.foreign_git_above(path))
                {
                    return deny(
                        rule::PROTECTED,
                        DenyKind::Permission,
                        format!(
                            "agents may not move anything {end} {what} ({path}): a move would bring in or carry off git hooks and config without their own checks; use git itself (git init, git clone) to make repositories"
                        ),
                    );
                }
            }
        }
        self.check_in(who, Access::Delete, from, git)?;
        self.check_as(who, Access::Create, to, true, git)
    }

    /// What a move may not start from or end on, with `.git` protected: a `.git` name itself
    /// (moving a prepared folder into place) or a git dir's `hooks` (a whole prepared hooks
    /// folder).
    fn git_move_target(&self, path: &NsPath, git: &dyn GitRepos) -> Option<&'static str> {
        if path.file_name().is_some_and(is_git_dir_named) {
            return Some("a .git folder");
        }
        let hooks = |rest: &[&str]| rest.len() == 1 && rest[0].eq_ignore_ascii_case(GIT_HOOKS);
        (!self.git_dirs_where(path, git, hooks).is_empty()).then_some("a git dir's hooks folder")
    }

    /// Whether `path` is a git config file an agent may make only by renaming a finished file
    /// onto it, whose settings the daemon checks first (`clawfs_core::gitconfig`): `.git/config`, or
    /// the `config` of a submodule's git dir, in any letter case, where `.git` is protected.
    pub fn is_git_config(&self, path: &NsPath, git: &dyn GitRepos) -> bool {
        self.in_git_dir_where(path, git, git_config_in)
    }

    /// The git dirs in `path` (as the index of their component) whose following components
    /// pass `rest_is`, where `.git` is protected: every `.git` in any letter case, and every
    /// folder `git` finds holding a `HEAD` under another name — asked only where the rest
    /// would pass, so the names alone decide most paths.
    fn git_dirs_where(
        &self,
        path: &NsPath,
        git: &dyn GitRepos,
        rest_is: impl Fn(&[&str]) -> bool,
    ) -> Vec<usize> {
        if !self.guards_git() {
            return Vec::new();
        }
        let parts: Vec<&str> = path.components().collect();
        let passing: Vec<usize> = (0..parts.len())
            .filter(|&i| rest_is(&parts[i + 1..]))
            .collect();
        // A git dir by content holds the path: it is neither the path itself nor an area.
        let unnamed = |i: usize| !is_git_dir_named(parts[i]) && i > 0 && i + 1 < parts.len();
        let by_content = match passing.iter().any(|&i| unnamed(i)) {
            true => git.git_dirs(path),
            false => Vec::new(),
        };
        passing
            .into_iter()
            .filter(|&i| is_git_dir_named(parts[i]) || (unnamed(i) && by_content.contains(&i)))
            .collect()
    }

    /// Whether `path` is in a git dir (see [`Policy::git_dirs_where`]) where the components
    /// after it, as seen from the git dir they are in ([`beyond_worktrees`]), pass `rest_is`.
    fn in_git_dir_where(
        &self,
        path: &NsPath,
        git: &dyn GitRepos,
        rest_is: impl Fn(&[&str]) -> bool,
    ) -> bool {
        !self
            .git_dirs_where(path, git, |rest| rest_is(beyond_worktrees(rest)))
            .is_empty()
    }

    /// Whether `path` is a git index (`.git/index`, a worktree's or a submodule's, or a split
    /// index's `sharedindex.*`) an agent may make only by renaming a finished file onto it,
    /// whose entries the daemon checks first (`clawfs_core::git_index`), in any letter case,
    /// where `.git` is protected.
    pub fn is_git_index(&self, path: &NsPath, git: &dyn GitRepos) -> bool {
        self.in_git_dir_where(path, git, git_index_in)
    }

    /// Whether `path` is a hook git would run: a file directly in a `.git/hooks` folder (or a
    /// submodule's) not named `*.sample`, where `.git` is protected. Whoever may still write
    /// the file once it has that name decides what its repository's owner runs.
    pub fn is_active_git_hook(&self, path: &NsPath, git: &dyn GitRepos) -> bool {
        self.in_git_dir_where(path, git, |rest| {
            git_hooks_at(rest).is_some_and(|h| {
                h + 2 == rest.len() && !rest[h + 1].to_ascii_lowercase().ends_with(".sample")
            })
        })
    }

    /// A hard link to `from` at `to`: the caller must be able to modify the source (the new name
    /// reaches the same content) and create the destination, so a link never turns a read-only
    /// file into a writable one.
    pub fn check_link(&self, who: &Identity, from: &NsPath, to: &NsPath) -> Result<(), Denial> {
        self.check_link_in(who, from, to, &EveryRepoForeign)
    }

    /// [`Policy::check_link`], with the git guard applied where `git` finds a repository
    /// someone other than the caller owns. A hard link named `.git` is refused everywhere:
    /// git would trust the linked file's owner, not the agent.
    pub fn check_link_in(
        &self,
        who: &Identity,
        from: &NsPath,
        to: &NsPath,
        git: &dyn GitRepos,
    ) -> Result<(), Denial> {
        if matches!(who, Identity::Agent(_))
            && to
                .components()
                .last()
                .is_some_and(|c| self.is_git_dir_name(c))
        {
            return deny(
                rule::PROTECTED,
                DenyKind::Permission,
                format!("{to}: a .git that is not a folder would send git to a repository of its choosing; agents make repositories as .git folders (git init)"),
            );
        }
        if matches!(who, Identity::Agent(_))
            && self.is_in_git_hooks(to, git)
            && git.foreign_git_above(to)
        {
            return deny(
                rule::PROTECTED,
                DenyKind::ReadOnly,
                format!("{to}: a second name in git's hooks folder of a repository you do not own would let you write, by your own name, what its owner's git runs once the file is a hook; git makes hook samples as new files"),
            );
        }
        self.check_in(who, Access::Write, from, git)?;
        self.check_in(who, Access::Create, to, git)
    }

    /// Whether `path` is in a `.git` folder's `refs/` or `logs/` (a submodule's included), where
    /// `.git` is protected: files git reads as refs and their logs, never as an index.
    pub fn is_git_ref_or_log(&self, path: &NsPath, git: &dyn GitRepos) -> bool {
        self.in_git_dir_where(path, git, |rest| {
            rest.split_last().is_some_and(|(_, dirs)| {
                dirs.iter()
                    .any(|d| GIT_REF_FOLDERS.iter().any(|r| d.eq_ignore_ascii_case(r)))
            })
        })
    }

    /// Whether `path` is in git's hooks folder (or a submodule's), where `.git` is protected.
    pub fn is_in_git_hooks(&self, path: &NsPath, git: &dyn GitRepos) -> bool {
        self.in_git_dir_where(path, git, |rest| git_hooks_at(rest).is_some())
    }

    /// Whether `path` is, or is in, a `.git` folder (any letter case), or is in a git dir of
    /// another name (see [`Policy::git_dir_where`]), while the git guard is on: a folder moved
    /// in or out would carry config, hooks or a `HEAD` past the guard, which checks names as
    /// they are made.
    pub fn is_in_git_dir(&self, path: &NsPath, git: &dyn GitRepos) -> bool {
        self.in_git_dir_where(path, git, |_| true)
    }

    /// Whether `name` is `.git` (any letter case) while the git guard is on: agents may make it
    /// only as a folder. A `.git` file (`gitdir: …`) or symlink would make git use a folder of
    /// another name, whose config and hooks the guard does not see.
    pub fn is_git_dir_name(&self, name: &str) -> bool {
        self.guards_git() && name.eq_ignore_ascii_case(GIT_DIR)
    }

    /// Whether an agent that holds `used` may add `adding`. Only growth is checked,
    /// so an agent over its quota (after the policy lowered it) can still delete and shrink.
    /// Admins and ordinary users have no ClawFS quota.
    pub fn check_quota(&self, who: &Identity, used: Quota, adding: Quota) -> Result<(), Denial> {
        let Identity::Agent(name) = who else {
            return Ok(());
        };
        let limit = self.quota(name);
        if adding.bytes > 0 && used.bytes.saturating_add(adding.bytes) > limit.bytes {
            return deny(
                rule::QUOTA,
                DenyKind::Quota,
                format!(
                    "agent {name} holds {} bytes of its {}-byte quota and cannot add {} more; delete or shrink files it owns (see `clawfs quota`), or ask an admin to raise quota.bytes",
                    used.bytes, limit.bytes, adding.bytes
                ),
            );
        }
        if adding.files > 0 && used.files.saturating_add(adding.files) > limit.files {
            return deny(
                rule::QUOTA,
                DenyKind::Quota,
                format!(
                    "agent {name} owns {} of its {} files (and folders and symlinks) and cannot create more; delete some or ask an admin to raise quota.files",
                    used.files, limit.files
                ),
            );
        }
        Ok(())
    }

    /// Checks that the agent `who` may act as `uid`, whose files are counted for `holder` (if
    /// anyone): not when that is another agent, whose files and quota it would take.
    pub fn check_uid_claim(
        &self,
        who: &Identity,
        uid: u32,
        holder: Option<&str>,
    ) -> Result<(), Denial> {
        match (who, holder) {
            (Identity::Agent(name), Some(other)) if other != name.as_str() => deny(
                rule::ONE_UID,
                DenyKind::Permission,
                format!(
                    "uid {uid} owns files counted for agent {other} (clawfs quota), so it cannot act as agent {name}; give {name} a uid of its own, or remove those files and run clawfs quota rescan"
                ),
            ),
            _ => Ok(()),
        }
    }

    fn check_user(&self, access: Access, path: &NsPath) -> Result<(), Denial> {
        if path.get(0) == Some(VAULT) && path.get(1) == Some("secrets") && path.depth() > 2 {
            // Plaintext is for the admin and the agents granted the secret, whatever `users`.
            return deny(
                rule::VAULT_GRANT,
                DenyKind::Access,
                format!(
                    "secrets are served to the admin and to agents granted them, so you may not {} {path}; ask an admin",
                    access.verb()
                ),
            );
        }
        let writable_root = match path.get(0) {
            None | Some(SYSTEM) | Some(SPECS) => false,
            Some(_) => true,
        };
        match self.users {
            UsersMode::Posix => Ok(()),
            _ if !writable_root => Ok(()),
            UsersMode::ReadOnly if access.is_read() => Ok(()),
            UsersMode::ReadOnly => deny(
                rule::USERS_MODE,
                DenyKind::ReadOnly,
                format!(
                    "ordinary users may only read under /{}/ on this mount (users = \"read-only\"), so you may not {} {path}; ask an admin",
                    path.get(0).unwrap_or_default(),
                    access.verb()
                ),
            ),
            UsersMode::None => deny(
                rule::USERS_MODE,
                DenyKind::Access,
                format!(
                    "ordinary users have no access to /{}/ on this mount (users = \"none\"); ask an admin",
                    path.get(0).unwrap_or_default()
                ),
            ),
        }
    }

    /// Whether `name` is `HEAD` while the git guard is on: the file that makes a folder a bare
    /// repository, which git trusts for the folder's owner (see the `HEAD` rule of the guard).
    pub fn is_git_head_name(&self, name: &str) -> bool {
        self.guards_git() && name == GIT_HEAD
    }

    /// Whether the policy protects `.git` (in any letter case), which for agents means the git
    /// guard of `git_guard` rather than full protection.
    pub fn guards_git(&self) -> bool {
        self.protected()
            .iter()
            .any(|p| p.eq_ignore_ascii_case(GIT_DIR))
    }

    fn check_agent(
        &self,
        me: &AgentSpec,
        access: Access,
        path: &NsPath,
        renamed_onto: bool,
        git: &dyn GitRepos,
    ) -> Result<(), Denial> {
        let parts: Vec<&str> = path.components().collect();
        for (i, c) in parts.iter().enumerate() {
            if let Some(p) = self.protected_match(c) {
                if p.eq_ignore_ascii_case(GIT_DIR) {
                    // Asked only of what the guard would refuse: the walk costs a few stats.
                    match git_guard(access, path, &parts[i + 1..], renamed_onto) {
                        Err(d) if git.foreign_git_above(path) => return Err(d),
                        _ => {}
                    }
                    if touches_lock(access, renamed_onto)
                        && git_lock_in(&parts[i + 1..])
                        && !git.owns_file(path)
                        && git.foreign_git_above(path)
                    {
                        return Err(foreign_lock(path));
                    }
                    // A `.git` file (`gitdir: …`) sends git, a superproject's recursing with
                    // `GIT_DIR` set, to the repository it names: changed only where making
                    // one is allowed, by its owner.
                    if access == Access::Write
                        && i + 1 == parts.len()
                        && (git.foreign_git_above(path)
                            || !git.owns_file(path)
                            || !git.owns_folder(path))
                    {
                        return deny(
                            rule::PROTECTED,
                            DenyKind::ReadOnly,
                            format!(
                                "{path} is a .git file (gitdir:) that is not yours in a folder of your own, or in a repository you do not own; it tells git, its owner's included, which repository to use, so it is read-only to you"
                            ),
                        );
                    }
                    continue;
                }
                return deny(
                    rule::PROTECTED,
                    DenyKind::Permission,
                    format!(
                        "{path} is inside '{c}', which matches the protected name '{p}'; agents may not read, write or delete protected folders in any letter case, so work outside it"
                    ),
                );
            }
        }
        self.guard_unnamed_git_dirs(access, path, renamed_onto, git)?;
        if access == Access::Create
            && self.guards_git()
            && parts.last() == Some(&GIT_HEAD)
            && !parts.iter().any(|c| c.eq_ignore_ascii_case(GIT_DIR))
            && (git.foreign_git_above(path) || !git.owns_folder(path))
        {
            return deny(
                rule::PROTECTED,
                DenyKind::Permission,
                format!(
                    "{path}: a HEAD file outside a .git folder, in a folder you do not own, would make a bare git repository that git trusts for the folder's owner, whose config and hooks the git guard does not see; agents make repositories as .git folders (git init), or bare ones in folders of their own"
                ),
            );
        }
        if touches_lock(access, renamed_onto)
            && self.guards_git()
            && parts.last().is_some_and(|c| {
                c.strip_suffix(LOCK_SUFFIX)
                    .is_some_and(|t| t.eq_ignore_ascii_case(GITMODULES))
            })
            && !git.owns_file(path)
            && git.at_repo_top(path)
            && git.foreign_git_above(path)
        {
            return Err(foreign_lock(path));
        }
        if !access.is_read()
            && self.guards_git()
            && parts
                .last()
                .is_some_and(|c| c.eq_ignore_ascii_case(GITMODULES))
            && git.at_repo_top(path)
            && git.foreign_git_above(path)
        {
            return deny(
                rule::PROTECTED,
                DenyKind::ReadOnly,
                format!(
                    "{path} is the .gitmodules file of a repository you do not own, which tells its owner's git where to fetch code from; it is read-only to agents in any letter case, so you may not {} it; ask the repository's owner to change submodules",
                    access.verb()
                ),
            );
        }
        let Some(area) = path.get(0) else {
            if access.is_read() {
                return Ok(());
            }
            return deny(
                rule::NAMESPACE,
                DenyKind::Permission,
                "the mount root holds only the six areas and cannot be changed".to_string(),
            );
        };
        match area {
            SYSTEM | SPECS => self.read_only_root(area, access, path),
            TOOLS => self.check_tools(me, access, path),
            AGENTS => self.check_agents_area(me, access, path),
            WORKSPACES => self.check_workspaces(me, access, path),
            VAULT => self.check_vault(me, access, path),
            _ => deny(
                rule::NAMESPACE,
                DenyKind::Permission,
                format!(
                    "{path} is outside the six areas (agents, specs, system, tools, vault, workspaces)"
                ),
            ),
        }
    }

    /// The git guard in git dirs not named `.git` (a bare repository, a `--separate-git-dir`,
    /// a mirror) someone other than the caller owns: refused as at a `.git`, and their `HEAD`,
    /// which makes them git dirs to git and the guard alike, is never removed or renamed away
    /// (git replaces it by a rename onto it).
    fn guard_unnamed_git_dirs(
        &self,
        access: Access,
        path: &NsPath,
        renamed_onto: bool,
        git: &dyn GitRepos,
    ) -> Result<(), Denial> {
        if access.is_read() {
            return Ok(());
        }
        let locks = touches_lock(access, renamed_onto);
        let removes_head = |rest: &[&str]| access == Access::Delete && rest == [GIT_HEAD];
        let refused = |rest: &[&str]| {
            !rest.is_empty()
                && (git_guard(access, path, rest, renamed_onto).is_err()
                    || (locks && git_lock_in(rest))
                    || removes_head(rest))
        };
        let parts: Vec<&str> = path.components().collect();
        let Some(at) = self
            .git_dirs_where(path, git, refused)
            .into_iter()
            .find(|&i| !is_git_dir_named(parts[i]))
        else {
            return Ok(());
        };
        if !git.foreign_git_above(path) {
            return Ok(());
        }
        let rest = &parts[at + 1..];
        git_guard(access, path, rest, renamed_onto)?;
        if removes_head(rest) {
            return deny(
                rule::PROTECTED,
                DenyKind::ReadOnly,
                format!(
                    "{path} is the HEAD that makes its folder a git repository you do not own; git replaces it by renaming a new one onto it, but agents may not remove it or rename it away"
                ),
            );
        }
        match git.owns_file(path) {
            true => Ok(()),
            false => Err(foreign_lock(path)),
        }
    }

    /// Area roots are listable; changing one is a change to the fixed mount root.
    fn area_root(&self, access: Access, path: &NsPath) -> Result<(), Denial> {
        if access.is_read() {
            return Ok(());
        }
        deny(
            rule::NAMESPACE,
            DenyKind::Permission,
            format!(
                "{path} is an area root of the fixed namespace and cannot be changed by agents"
            ),
        )
    }

    fn read_only_root(&self, area: &str, access: Access, path: &NsPath) -> Result<(), Denial> {
        if access.is_read() {
            return Ok(());
        }
        let hint = if area == TOOLS {
            "; call a tool by writing /tools/call/<tool> or /tools/requests/<id>.json instead"
        } else {
            ""
        };
        deny(
            rule::READ_ONLY_ROOT,
            DenyKind::ReadOnly,
            format!(
                "/{area}/ is read-only to agents, so you may not {} {path}{hint}",
                access.verb()
            ),
        )
    }

    /// `/tools`: readable; the call interface (`call/<tool>`, `requests/<id>`, `responses/<id>`)
    /// is usable by every agent; anything else is writable only with `tools = "read-write"`.
    fn check_tools(&self, me: &AgentSpec, access: Access, path: &NsPath) -> Result<(), Denial> {
        if access.is_read() {
            return Ok(());
        }
        if path.depth() == 3 {
            let call_interface = match path.get(1) {
                Some("call") => access == Access::Write,
                Some("requests") => true,
                Some("responses") => access == Access::Delete,
                _ => false,
            };
            if call_interface {
                return Ok(());
            }
        }
        if path.depth() > 1 && me.tools == Grant::ReadWrite {
            return Ok(());
        }
        if path.depth() == 1 {
            return self.area_root(access, path);
        }
        self.read_only_root(TOOLS, access, path)
    }

    fn check_agents_area(
        &self,
        me: &AgentSpec,
        access: Access,
        path: &NsPath,
    ) -> Result<(), Denial> {
        let myself = &me.name;
        let Some(owner) = path.get(1) else {
            if !access.is_read() {
                return deny(
                    rule::RULE_001,
                    DenyKind::Access,
                    format!(
                        "agents may not change /agents/ itself; write inside /agents/{myself}/ instead"
                    ),
                );
            }
            return Ok(());
        };
        if owner == SELF_FILE && path.depth() == 2 {
            if access == Access::Read {
                return Ok(());
            }
            return deny(
                rule::NAMESPACE,
                DenyKind::Permission,
                "/agents/self is a read-only file that tells you who you are".to_string(),
            );
        }
        if owner == myself.as_str() {
            return own_dir(myself, access, path);
        }
        if access.is_read() {
            if self.may_read_agent(myself, owner) {
                return Ok(());
            }
            return deny(
                rule::AGENT_READ,
                DenyKind::Access,
                format!(
                    "{path} belongs to agent {owner}, and you ({myself}) may only read your own /agents/{myself}/ unless the policy lists {owner} in your read_agents"
                ),
            );
        }
        deny(
            rule::RULE_001,
            DenyKind::Access,
            format!(
                "agents may only write inside their own directory, so you ({myself}) may not {} {path}; write inside /agents/{myself}/ instead",
                access.verb()
            ),
        )
    }

    fn check_workspaces(
        &self,
        me: &AgentSpec,
        access: Access,
        path: &NsPath,
    ) -> Result<(), Denial> {
        let Some(ws) = path.get(1) else {
            return self.area_root(access, path);
        };
        if path.depth() == 2 && matches!(access, Access::Create | Access::Delete) {
            return deny(
                rule::WORKSPACE_ROOT,
                DenyKind::Permission,
                format!(
                    "agents may not create, remove or rename whole workspaces such as {path}; ask an admin"
                ),
            );
        }
        let grant = self.workspace_grant(&me.name, ws);
        if path.depth() == 3
            && path.get(2) == Some(WORKSPACE_METADATA)
            && !access.is_read()
            && grant.allows(Access::Read)
        {
            return deny(
                rule::WORKSPACE_ROOT,
                DenyKind::ReadOnly,
                format!(
                    "{path} holds the workspace's settings, which the search index and snapshots rely on; agents read it but may not {} it: set the vector dimension with `setfattr -n user.clawfs.vector_dimension -v N` on the workspace, or ask an admin",
                    access.verb()
                ),
            );
        }
        if grant.allows(access) {
            return Ok(());
        }
        let name = &me.name;
        match grant {
            Grant::Read => deny(
                rule::WORKSPACE_GRANT,
                DenyKind::ReadOnly,
                format!(
                    "workspace {ws} is read-only for agent {name}, so you may not {} {path}; write in a workspace granted read-write or in /agents/{name}/",
                    access.verb()
                ),
            ),
            _ => deny(
                rule::WORKSPACE_GRANT,
                DenyKind::Access,
                format!(
                    "agent {name} has no grant on workspace {ws}, so you may not {} {path}; ask an admin for a grant in [agents.{name}] workspaces",
                    access.verb()
                ),
            ),
        }
    }

    /// `/vault`: the root and `secrets/` are listable; a granted secret is readable as
    /// `secrets/<id>` or `secrets/<id>.enc`; nothing else, and nothing is writable.
    fn check_vault(&self, me: &AgentSpec, access: Access, path: &NsPath) -> Result<(), Denial> {
        let name = &me.name;
        if path.depth() == 1 {
            return self.area_root(access, path);
        }
        if !access.is_read() {
            return deny(
                rule::VAULT_GRANT,
                DenyKind::Access,
                format!("agents may not change the vault ({path}); ask an admin to manage secrets"),
            );
        }
        if path.get(1) != Some("secrets") {
            return deny(
                rule::VAULT_GRANT,
                DenyKind::Access,
                format!(
                    "agents may read only their granted secrets under /vault/secrets/, not {path}"
                ),
            );
        }
        match path.depth() {
            2 => Ok(()),
            3 => {
                let file = path.get(2).unwrap_or_default();
                let id = file.strip_suffix(".enc").unwrap_or(file);
                if access == Access::Read && me.secrets.contains(id) {
                    return Ok(());
                }
                deny(
                    rule::VAULT_GRANT,
                    DenyKind::Access,
                    format!(
                        "agent {name} is not granted the secret {id}; ask an admin to add it to [agents.{name}] secrets"
                    ),
                )
            }
            _ => deny(
                rule::VAULT_GRANT,
                DenyKind::Access,
                format!("{path} is not a secret agents may read"),
            ),
        }
    }
}

/// An agent in its own directory: everything, except that the directory itself is not created,
/// removed or renamed, and `logs/` and `denials` are written by ClawFS only.
fn own_dir(myself: &AgentName, access: Access, path: &NsPath) -> Result<(), Denial> {
    if path.depth() == 2 {
        if matches!(access, Access::Create | Access::Delete) {
            return deny(
                rule::RULE_001,
                DenyKind::Permission,
                format!(
                    "your own directory /agents/{myself} cannot be created, removed or renamed by you; work inside it"
                ),
            );
        }
        return Ok(());
    }
    let record = match path.get(2) {
        Some("logs") => Some("logs/"),
        Some("denials") if path.depth() == 3 => Some("denials"),
        _ => None,
    };
    match record {
        Some(what) if !access.is_read() => deny(
            rule::AGENT_LOGS,
            DenyKind::Permission,
            format!(
                "/agents/{myself}/{what} is written by ClawFS only, so you may not {} {path}; read it, and keep your own files elsewhere in /agents/{myself}/",
                access.verb()
            ),
        ),
        _ => Ok(()),
    }
}

/// Whether `name` is `.git` in any letter case.
fn is_git_dir_named(name: &str) -> bool {
    name.eq_ignore_ascii_case(GIT_DIR)
}

/// Whether `rest` (the components after a `.git`) names a file git acts on that agents make only
/// by a checked rename: git's config (`config`, `config.worktree`, a submodule git dir's below
/// `modules/`).
fn git_config_in(rest: &[&str]) -> bool {
    let is = |i: usize, name: &str| rest.get(i).is_some_and(|c| c.eq_ignore_ascii_case(name));
    let config = |i: usize| is(i, GIT_CONFIG) || is(i, GIT_CONFIG_WORKTREE);
    let submodule = is(0, GIT_MODULES) && rest.len() > 2;
    match submodule {
        true => config(rest.len() - 1),
        // `.git/config`, `.git/config.worktree`, `.git/worktrees/<x>/config.worktree`.
        false => {
            (rest.len() == 1 && config(0))
                || (rest.len() == 3 && is(0, GIT_WORKTREES) && is(2, GIT_CONFIG_WORKTREE))
        }
    }
}

const GIT_INDEX: &str = "index";
const GIT_SHARED_INDEX: &str = "sharedindex.";
/// Folders of a git dir whose files are refs and their logs, never an index (a branch may be
/// called `index`).
const GIT_REF_FOLDERS: &[&str] = &["refs", "logs"];

/// Whether `rest` (the components after a `.git`) names a git index: `index` or a split
/// index's `sharedindex.<hash>`, in the git dir, a worktree's (`worktrees/<x>/`) or a
/// submodule's (`modules/<name>/`), never below `refs/` or `logs/`. git checks out what an
/// index lists without checking its paths, so one naming `.git/hooks/…` would be written by
/// its owner's next `git checkout`.
fn git_index_in(rest: &[&str]) -> bool {
    let Some((last, dirs)) = rest.split_last() else {
        return false;
    };
    let named = last.eq_ignore_ascii_case(GIT_INDEX)
        || last
            .get(..GIT_SHARED_INDEX.len())
            .is_some_and(|p| p.eq_ignore_ascii_case(GIT_SHARED_INDEX));
    let is = |i: usize, name: &str| dirs.get(i).is_some_and(|c| c.eq_ignore_ascii_case(name));
    named
        && match dirs.len() {
            0 => true,
            2 if is(0, GIT_WORKTREES) => true,
            _ => {
                is(0, GIT_MODULES)
                    && dirs.len() > 1
                    && !dirs
                        .iter()
                        .any(|c| GIT_REF_FOLDERS.iter().any(|r| c.eq_ignore_ascii_case(r)))
            }
        }
}

/// The folders of an operation in progress — a rebase, `git am`, a cherry-pick or revert —
/// whose files say what git runs when whoever continues it does (`exec` lines, a merge
/// strategy, which git runs as `git-merge-<strategy>`, strategy options).
const GIT_IN_PROGRESS: &[&str] = &[
    "rebase-merge",
    "rebase-apply",
    "sequencer",
    // Recorded conflict resolutions (rerere), which git turns on once `rr-cache` exists and
    // replays after every commit and merge onto the paths `MERGE_RR` names, wherever they are.
    "rr-cache",
    "MERGE_RR",
    // The branch `git bisect reset` checks out, passed to `git checkout` as its argument.
    "BISECT_START",
];

/// Whether `rest` (the components after a `.git`) is in, or is, the state of an operation in
/// progress ([`GIT_IN_PROGRESS`]), in the repository's git dir or a submodule's.
fn git_in_progress_in(rest: &[&str]) -> bool {
    rest.iter()
        .any(|c| GIT_IN_PROGRESS.iter().any(|s| c.eq_ignore_ascii_case(s)))
}

/// The folders of `.git` where git still reads remotes defined the old way (`remotes/<name>`,
/// `branches/<name>`: a URL each), which modern git never writes.
const LEGACY_REMOTES: &[&str] = &["remotes", "branches"];

/// What git writes a file in place of `X` as, before renaming it onto `X`.
const LOCK_SUFFIX: &str = ".lock";

/// Whether `rest` (the components after a `.git`) names a lock file: what git writes a file
/// as (`config.lock`, `index.lock`, `index.stash.<pid>.lock`, `refs/heads/main.lock`…) before
/// renaming it onto its target, which it never shares with another writer.
fn git_lock_in(rest: &[&str]) -> bool {
    rest.last().is_some_and(|last| {
        last.len() > LOCK_SUFFIX.len()
            && last
                .get(last.len() - LOCK_SUFFIX.len()..)
                .is_some_and(|s| s.eq_ignore_ascii_case(LOCK_SUFFIX))
    })
}

/// Whether `access` (a rename's destination if `renamed_onto`) changes what a lock file there
/// holds when its owner's git renames it into place: writing it, removing it (and making one
/// of the agent's own in its place), or renaming a file onto it.
fn touches_lock(access: Access, renamed_onto: bool) -> bool {
    access == Access::Write
        || access == Access::Delete
        || (access == Access::Create && renamed_onto)
}

/// The refusal of writing someone else's lock file of a file the guard keeps (a config, the
/// top `.gitmodules`): what is written through it lands when its owner's git renames it into
/// place, unchecked.
fn foreign_lock(path: &NsPath) -> Denial {
    Denial::new(
        rule::PROTECTED,
        DenyKind::ReadOnly,
        format!(
            "{path} is a lock file someone else's git is writing a file as (its config, an index, a ref, .gitmodules…), which it renames into place unchecked; agents may not write, remove or rename onto lock files other than their own there"
        ),
    )
}

/// Whether `rest` (the components after a `.git`) holds a `hooks` or `config` other than
/// git's own (those [`git_hooks_at`] and [`git_config_in`] place): one a `HEAD` coming beside
/// it later would make a git dir's. A branch may be named `hooks` or `config`: a file
/// directly in `refs/heads/` (or its log) under that name is a ref, and no `HEAD` is made
/// there ([`ref_named_head`]).
fn deep_hooks_or_config(rest: &[&str]) -> bool {
    let named = |c: &&str| c.eq_ignore_ascii_case(GIT_HOOKS) || c.eq_ignore_ascii_case(GIT_CONFIG);
    let branch = |r: &[&str]| {
        r.len() == 3 && r[0].eq_ignore_ascii_case("refs") && r[1].eq_ignore_ascii_case("heads")
    };
    let is_branch = branch(rest)
        || (rest.len() == 4 && rest[0].eq_ignore_ascii_case("logs") && branch(&rest[1..]));
    !is_branch && rest.iter().any(named)
}

/// Whether `rest` (the components after a `.git`) is a `HEAD` in `refs/` or `logs/` other
/// than git's own there (`logs/HEAD`, a remote's `refs/remotes/<r>/HEAD` and its log): a
/// folder holding one is a git dir to git, with what the agent put in it.
fn ref_named_head(rest: &[&str]) -> bool {
    let is = |i: usize, n: &str| rest.get(i).is_some_and(|c| c.eq_ignore_ascii_case(n));
    let Some(last) = rest.last() else {
        return false;
    };
    let skip = usize::from(is(0, "logs"));
    let remote_head = rest.len() == skip + 4 && is(skip, "refs") && is(skip + 1, "remotes");
    *last == GIT_HEAD
        && rest.len() > 1
        && (is(0, "refs") || is(0, "logs"))
        && !(rest.len() == 2 && is(0, "logs"))
        && !remote_head
}

/// Whether `rest` (the components after a `.git`) names a file that sends git to another
/// repository and its config and hooks: a `commondir` or `gitdir` at any depth — `.git`'s own,
/// a worktree's, and those of a submodule's git dir below `modules/`, which a superproject's
/// git enters with `GIT_DIR` set and no ownership check — or `objects/info/alternates` (and
/// `http-alternates`), whose repositories the owner's fetch and push list refs of by running
/// git in them with `--git-dir`, which skips the ownership check too.
fn git_redirect_in(rest: &[&str]) -> bool {
    let alternates = match rest {
        [.., info, last] => {
            info.eq_ignore_ascii_case("info")
                && (last.eq_ignore_ascii_case("alternates")
                    || last.eq_ignore_ascii_case("http-alternates"))
        }
        _ => false,
    };
    alternates
        || rest.last().is_some_and(|c| {
            c.eq_ignore_ascii_case(GIT_COMMONDIR) || c.eq_ignore_ascii_case("gitdir")
        })
}

/// `rest` (the components after a `.git`) as seen from the git dir it is in: a linked
/// worktree's (`worktrees/<x>/`) holds what the main one does — an index, `config.worktree`,
/// operation state, and its own submodules' git dirs (`worktrees/<x>/modules/<name>/`, with
/// their config and hooks) — so its files are guarded as the main git dir's are.
fn beyond_worktrees<'a, 'b>(mut rest: &'a [&'b str]) -> &'a [&'b str] {
    while rest.len() > 2 && rest[0].eq_ignore_ascii_case(GIT_WORKTREES) {
        rest = &rest[2..];
    }
    rest
}

/// Where in `rest` (the components after a `.git`) git's hooks folder is, if `rest` is in it:
/// `hooks/`, or a submodule's (`modules/<name>/hooks/`, the name may hold `/`), whose own
/// hooks its superproject's git runs too.
fn git_hooks_at(rest: &[&str]) -> Option<usize> {
    let is = |i: usize, name: &str| rest.get(i).is_some_and(|c| c.eq_ignore_ascii_case(name));
    match is(0, GIT_MODULES) && rest.len() > 2 {
        true => (2..rest.len()).find(|&i| is(i, GIT_HOOKS)),
        false => is(0, GIT_HOOKS).then_some(0),
    }
}

/// The git guard: with `.git` protected, agents may use git (read and write a `.git` folder)
/// but not change what makes git run code or fetch from elsewhere. `rest` is the components
/// after a `.git` component of `path`.
///
/// - `.git/hooks/` and everything under it is read-only, except that `git init` may make the
///   folder and the inert `*.sample` files its templates hold (git never runs a `.sample`).
/// - `.git/config` may not be modified or deleted. It may be created, because `git init` writes
///   it (as `config.lock`, renamed onto `config`); replacing an existing one by a rename is
///   refused only if the filesystem also checks a replaced destination for modification.
/// - the index (`.git/index`, a worktree's, a submodule's, `sharedindex.*`) likewise: made only
///   by a rename, whose entries the daemon checks, never written in place.
/// - everything else in `.git` (objects, refs, HEAD, `info/`, …) is the agent's.
fn git_guard(
    access: Access,
    path: &NsPath,
    rest: &[&str],
    renamed_onto: bool,
) -> Result<(), Denial> {
    if access.is_read() {
        return Ok(());
    }
    let rest = beyond_worktrees(rest);
    let hooks_at = git_hooks_at(rest);
    let config = git_config_in(rest);
    let what = if let Some(h) = hooks_at {
        let git_init = access == Access::Create
            && match rest.len() - h {
                1 => true,
                2 => rest[h + 1].to_ascii_lowercase().ends_with(".sample"),
                _ => false,
            };
        if git_init {
            return Ok(());
        }
        "git's hooks folder, whose scripts git runs"
    } else if access != Access::Delete && !config && deep_hooks_or_config(rest) {
        // A folder that gets a `HEAD` later (a tag named `HEAD`, fetched into `refs/tags/` by
        // the owner's git or made by the agent's) becomes a git dir, with whatever `hooks/`
        // and `config` it holds.
        "a hooks or config deeper in git's folder, which would be a git dir's once a HEAD came beside it"
    } else if access == Access::Create && ref_named_head(rest) {
        "a ref named HEAD, whose folder would then be a git dir to git"
    } else if git_redirect_in(rest) {
        "a file that sends git to another repository and its config"
    } else if rest.len() > 1
        && LEGACY_REMOTES
            .iter()
            .any(|r| rest[0].eq_ignore_ascii_case(r))
    {
        "a remote's old-style definition (its URL, which may name a program git runs), which git still reads"
    } else if git_in_progress_in(rest) {
        // Ending the operation (git rebase --abort, --quit) removes its state; removing runs
        // nothing.
        if access == Access::Delete {
            return Ok(());
        }
        "the state of a rebase, git am or cherry-pick in progress, or of recorded conflict resolutions (rerere), which says what its owner's git runs when it continues (exec lines, merge strategies) or which files it rewrites after a commit"
    } else if git_index_in(rest) {
        // Made the way git makes it: a finished file renamed onto it, whose entries the daemon
        // checks (`clawfs_core::git_index`); never written in place. Removing it runs nothing.
        if (access == Access::Create && renamed_onto) || access == Access::Delete {
            return Ok(());
        }
        "git's index, whose entries its owner's git checks out without checking their paths (git itself may replace it, with entries git would check out itself)"
    } else if config {
        // Made the way git makes it: a finished file renamed onto it, whose settings the daemon
        // checks (`clawfs_core::gitconfig`); never opened for writing.
        if access == Access::Create && renamed_onto {
            return Ok(());
        }
        "git's config file, which can make git run commands or fetch elsewhere (git itself may replace it, with settings that run nothing)"
    } else {
        return Ok(());
    };
    deny(
        rule::PROTECTED,
        DenyKind::ReadOnly,
        format!(
            "{path} is inside {what}, in a repository you do not own; agents may use git there but may not {} hooks or config in any letter case (.git/hooks/, .git/config, .gitmodules), so ask the repository's owner to change them",
            access.verb()
        ),
    )
}
