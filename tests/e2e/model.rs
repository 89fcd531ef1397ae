//! ClawFS against a reference: the same random operations applied to a workspace directory on
//! the mount and to a plain directory must give the same results (success or the same errno) and
//! leave the same trees; and fsx-style random read/write/truncate with data verification.

use std::fs::{self, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::common::{tree, Mounted};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

const NAMES: [&str; 7] = ["a", "b", "c", "d/x", "d/y", "e/z", "e/d/w"];
const DIRS: [&str; 4] = ["d", "e", "e/d", "f"];
const XATTRS: [&str; 2] = ["user.one", "user.two"];

#[derive(Clone, Debug)]
enum Op {
    Create(usize),
    Write(usize, u64, usize, u8),
    Truncate(usize, u64),
    Rename(usize, usize),
    RenameDir(usize, usize),
    Link(usize, usize),
    Unlink(usize),
    Mkdir(usize),
    Rmdir(usize),
    SetXattr(usize, usize, u8),
    RemoveXattr(usize, usize),
    Symlink(usize, usize),
}

fn op() -> impl Strategy<Value = Op> {
    let n = 0..NAMES.len();
    let d = 0..DIRS.len();
    prop_oneof![
        n.clone().prop_map(Op::Create),
        (n.clone(), 0u64..70_000, 0usize..9000, any::<u8>())
            .prop_map(|(a, o, l, b)| Op::Write(a, o, l, b)),
        (n.clone(), 0u64..70_000).prop_map(|(a, s)| Op::Truncate(a, s)),
        (n.clone(), n.clone()).prop_map(|(a, b)| Op::Rename(a, b)),
        (d.clone(), d.clone()).prop_map(|(a, b)| Op::RenameDir(a, b)),
        (n.clone(), n.clone()).prop_map(|(a, b)| Op::Link(a, b)),
        n.clone().prop_map(Op::Unlink),
        d.clone().prop_map(Op::Mkdir),
        d.clone().prop_map(Op::Rmdir),
        (n.clone(), 0..XATTRS.len(), any::<u8>()).prop_map(|(a, x, v)| Op::SetXattr(a, x, v)),
        (n.clone(), 0..XATTRS.len()).prop_map(|(a, x)| Op::RemoveXattr(a, x)),
        (n.clone(), n).prop_map(|(a, b)| Op::Symlink(a, b)),
    ]
}

/// Applies one operation under `root`; the result is compared, so only errnos matter.
fn apply(root: &Path, op: &Op) -> Result<(), i32> {
    let p = |i: usize| root.join(NAMES[i]);
    let d = |i: usize| root.join(DIRS[i]);
    let r: std::io::Result<()> = match op {
        Op::Create(a) => OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(p(*a))
            .map(drop),
        Op::Write(a, off, len, b) => OpenOptions::new()
            .write(true)
            .open(p(*a))
            .and_then(|f| f.write_all_at(&vec![*b; *len], *off)),
        Op::Truncate(a, s) => OpenOptions::new()
            .write(true)
            .open(p(*a))
            .and_then(|f| f.set_len(*s)),
        Op::Rename(a, b) => fs::rename(p(*a), p(*b)),
        Op::RenameDir(a, b) => fs::rename(d(*a), d(*b)),
        Op::Link(a, b) => fs::hard_link(p(*a), p(*b)),
        Op::Unlink(a) => fs::remove_file(p(*a)),
        Op::Mkdir(a) => fs::create_dir(d(*a)),
        Op::Rmdir(a) => fs::remove_dir(d(*a)),
        Op::SetXattr(a, x, v) => xattr::set(p(*a), XATTRS[*x], &[*v]),
        Op::RemoveXattr(a, x) => xattr::remove(p(*a), XATTRS[*x]),
        Op::Symlink(a, b) => std::os::unix::fs::symlink(NAMES[*a], p(*b)),
    };
    r.map_err(|e| e.raw_os_error().unwrap_or(-1))
}

fn xattr_tree(root: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (rel, desc) in tree(root) {
        let path = root.join(&rel);
        let mut attrs: Vec<String> = if desc.starts_with("link") {
            Vec::new()
        } else {
            xattr::list(&path)
                .map(|l| {
                    l.map(|n| {
                        let v = xattr::get(&path, &n).ok().flatten().unwrap_or_default();
                        format!("{}={v:?}", n.to_string_lossy())
                    })
                    .collect()
                })
                .unwrap_or_default()
        };
        attrs.sort();
        out.push((rel, format!("{desc} {attrs:?}")));
    }
    out
}

fn clear(dir: &Path) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if fs::symlink_metadata(&p).unwrap().is_dir() {
            fs::remove_dir_all(&p).unwrap();
        } else {
            fs::remove_file(&p).unwrap();
        }
    }
}

#[test]
fn random_operations_match_a_plain_directory() {
    let m = Mounted::new();
    let on_mount = m.ws().join("model");
    fs::create_dir(&on_mount).unwrap();
    let native = tempfile::tempdir_in("/tmp").unwrap();
    let mut runner = TestRunner::new(Config {
        cases: 48,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&proptest::collection::vec(op(), 1..40), |ops| {
            clear(&on_mount);
            clear(native.path());
            for o in &ops {
                let a = apply(&on_mount, o);
                let b = apply(native.path(), o);
                prop_assert_eq!(a, b, "{:?} differs", o);
            }
            prop_assert_eq!(xattr_tree(&on_mount), xattr_tree(native.path()));
            Ok(())
        })
        .unwrap();
}

#[derive(Clone, Debug)]
enum FsxOp {
    Write(u64, usize, u8),
    Truncate(u64),
    Read(u64, usize),
    Reopen,
}

fn fsx_op() -> impl Strategy<Value = FsxOp> {
    const MAX: u64 = 1 << 20;
    prop_oneof![
        4 => (0..MAX, 1usize..70_000, any::<u8>()).prop_map(|(o, l, b)| FsxOp::Write(o, l, b)),
        1 => (0..MAX).prop_map(FsxOp::Truncate),
        4 => (0..MAX + 4096, 1usize..70_000).prop_map(|(o, l)| FsxOp::Read(o, l)),
        1 => Just(FsxOp::Reopen),
    ]
}

fn fsx(m: &Mounted) {
    let path = m.ws().join("fsx.dat");
    let mut runner = TestRunner::new(Config {
        cases: 6,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&proptest::collection::vec(fsx_op(), 200..400), |ops| {
            let open = || {
                OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .read(true)
                    .write(true)
                    .open(&path)
                    .unwrap()
            };
            let mut f = open();
            f.set_len(0).unwrap();
            let mut model: Vec<u8> = Vec::new();
            for o in &ops {
                match *o {
                    FsxOp::Write(off, len, b) => {
                        f.write_all_at(&vec![b; len], off).unwrap();
                        let end = off as usize + len;
                        if model.len() < end {
                            model.resize(end, 0);
                        }
                        model[off as usize..end].fill(b);
                    }
                    FsxOp::Truncate(size) => {
                        f.set_len(size).unwrap();
                        model.resize(size as usize, 0);
                    }
                    FsxOp::Read(off, len) => {
                        let mut buf = vec![0u8; len];
                        let mut got = 0;
                        while got < len {
                            let n = f.read_at(&mut buf[got..], off + got as u64).unwrap();
                            if n == 0 {
                                break;
                            }
                            got += n;
                        }
                        let start = (off as usize).min(model.len());
                        let end = (off as usize + len).min(model.len());
                        prop_assert_eq!(got, end - start, "short read at {}", off);
                        prop_assert!(buf[..got] == model[start..end], "data differs at {}", off);
                    }
                    FsxOp::Reopen => f = open(),
                }
                prop_assert_eq!(f.metadata().unwrap().len(), model.len() as u64);
            }
            // And the backing file holds exactly the model.
            prop_assert!(fs::read(m.backing("workspaces/default/fsx.dat")).unwrap() == model);
            Ok(())
        })
        .unwrap();
}

#[test]
fn fsx_with_passthrough() {
    fsx(&Mounted::new());
}

#[test]
fn fsx_without_passthrough() {
    fsx(&Mounted::with_args(&["--no-passthrough"]));
}
