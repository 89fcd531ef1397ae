//! The workspace index without a mount: chunks, the built-in model, text/vector/hybrid queries,
//! updates and removals, permissions in results, and recovery from a lost or corrupt index.

use std::os::fd::AsFd;
use std::path::Path;
use std::sync::Arc;

use clawfs_search::embed::{BuiltinModel, Embedder, HashingEmbedder};
use clawfs_search::hnsw::HnswParams;
use clawfs_search::workspace::IndexFiles;
use clawfs_search::{Mode, Query, WorkspaceIndex};

fn model() -> BuiltinModel {
    BuiltinModel::load(&BuiltinModel::model_dir(), 256)
        .expect("the built-in model is installed (scripts/fetch-model.sh)")
}

fn ws_fd(dir: &Path) -> std::os::fd::OwnedFd {
    rustix::fs::open(
        dir,
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY,
        rustix::fs::Mode::empty(),
    )
    .unwrap()
}

/// The index of workspace `ws` in `dir`, with the hashing test double at `dim` components.
fn hashing_index(dir: &Path, dim: usize) -> (WorkspaceIndex, bool) {
    let e: Arc<dyn Embedder> = Arc::new(HashingEmbedder::new(dim));
    WorkspaceIndex::open(
        "ws",
        &IndexFiles::private(dir).unwrap(),
        dim,
        HnswParams::default(),
        Some(e),
    )
    .unwrap()
}

fn everything(_: &str) -> bool {
    true
}

fn query<'a>(
    ws: &'a std::os::fd::OwnedFd,
    text: &'a str,
    mode: Mode,
    readable: &'a dyn Fn(&str) -> bool,
) -> Query<'a> {
    Query {
        text,
        mode,
        limit: 5,
        readable,
        workspace: ws.as_fd(),
    }
}

fn write(dir: &Path, rel: &str, text: &str) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn corpus(ws: &Path) {
    write(
        ws,
        "pets/cats.md",
        "# Cats\n\nThe kitten sleeps on the sofa all afternoon and purrs.\n",
    );
    write(
        ws,
        "finance/budget.md",
        "# Budget\n\nQuarterly revenue grew while operating costs fell.\n",
    );
    write(
        ws,
        "code/net.rs",
        "fn connect() {\n    // open a TCP socket to the server\n}\n",
    );
    write(ws, "blob.bin", "\0\0binary");
}

#[test]
fn the_builtin_model_is_a_real_sentence_encoder() {
    let m = model();
    let v = m
        .embed(&["a young cat", "a kitten", "quarterly earnings report"])
        .unwrap();
    let cos = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
    assert!(
        cos(&v[0], &v[1]) > cos(&v[0], &v[2]) + 0.2,
        "cat~kitten {} vs cat~earnings {}",
        cos(&v[0], &v[1]),
        cos(&v[0], &v[2])
    );
    // Unit length, at the asked dimension (padded), and a fingerprint naming model and size.
    let padded = m.with_dimension(1536);
    let w = padded.embed(&["a young cat"]).unwrap().remove(0);
    assert_eq!(w.len(), 1536);
    assert!((cos(&w, &w) - 1.0).abs() < 1e-4);
    assert!(
        (cos(&w[..256], &v[0]) - 1.0).abs() < 1e-4,
        "padding keeps the cosine"
    );
    assert_eq!(padded.fingerprint(), "model2vec:potion-base-8M:1536");
}

#[test]
fn text_vector_and_hybrid_queries_find_the_right_lines() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    corpus(&ws);
    let embedder: Arc<dyn Embedder> = Arc::new(model().with_dimension(384));
    let (ix, fresh) = WorkspaceIndex::open(
        "ws",
        &IndexFiles::private(&tmp.path().join("ix")).unwrap(),
        384,
        HnswParams::default(),
        Some(embedder),
    )
    .unwrap();
    assert!(fresh);
    let fd = ws_fd(&ws);
    let r = ix.rescan(fd.as_fd(), &mut |_, _| {}).unwrap();
    assert_eq!((r.updated, r.failed), (4, 0));
    let (chunks, files, vectors) = ix.counts().unwrap();
    assert_eq!(
        (chunks, files, vectors),
        (3, 4, 3),
        "the binary file is recorded, not chunked"
    );

    let text = ix
        .query(&query(&fd, "operating costs", Mode::Text, &everything))
        .unwrap();
    assert_eq!(text[0].path, "finance/budget.md");
    assert_eq!((text[0].line_start, text[0].line_end), (1, 3));
    assert!(
        text[0].snippet.contains("operating costs"),
        "{}",
        text[0].snippet
    );

    // No shared word: only meaning connects "small feline napping" to the kitten.
    let vector = ix
        .query(&query(
            &fd,
            "small feline napping",
            Mode::Vector,
            &everything,
        ))
        .unwrap();
    assert_eq!(vector[0].path, "pets/cats.md", "{vector:?}");
    assert!(ix
        .query(&query(&fd, "small feline napping", Mode::Text, &everything))
        .unwrap()
        .is_empty());

    let hybrid = ix
        .query(&query(
            &fd,
            "TCP socket connection",
            Mode::Hybrid,
            &everything,
        ))
        .unwrap();
    assert_eq!(hybrid[0].path, "code/net.rs", "{hybrid:?}");
    assert!(hybrid[0].text_score.is_some() && hybrid[0].vector_score.is_some());
}

#[test]
fn a_stopped_rescan_says_what_it_left_and_the_next_one_takes_it_up() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    corpus(&ws);
    let (ix, _) = hashing_index(&tmp.path().join("ix"), 128);
    let fd = ws_fd(&ws);
    let visited = std::cell::Cell::new(0);
    let r = ix
        .rescan_while(fd.as_fd(), &mut |_, _| {}, &|| {
            visited.set(visited.get() + 1);
            visited.get() <= 1
        })
        .unwrap();
    assert_eq!((r.updated, r.left), (1, 3), "{r:?}");
    assert_eq!(ix.counts().unwrap().1, 1);
    let r = ix.rescan(fd.as_fd(), &mut |_, _| {}).unwrap();
    assert_eq!((r.updated, r.unchanged, r.left), (3, 1, 0), "{r:?}");
    assert_eq!(ix.counts().unwrap().1, 4);
}

#[test]
fn updates_renames_and_removals_are_followed() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    corpus(&ws);
    let (ix, _) = hashing_index(&tmp.path().join("ix"), 128);
    let fd = ws_fd(&ws);
    ix.rescan(fd.as_fd(), &mut |_, _| {}).unwrap();
    write(&ws, "pets/cats.md", "# Cats\n\nNow about zebras instead.\n");
    assert!(ix.update(fd.as_fd(), "pets/cats.md").unwrap());
    assert!(
        !ix.update(fd.as_fd(), "pets/cats.md").unwrap(),
        "unchanged: skipped"
    );
    let q = |t| ix.query(&query(&fd, t, Mode::Text, &everything)).unwrap();
    assert!(q("kitten").is_empty());
    assert_eq!(q("zebras")[0].path, "pets/cats.md");
    std::fs::rename(ws.join("pets/cats.md"), ws.join("pets/zebras.md")).unwrap();
    ix.update(fd.as_fd(), "pets/cats.md").unwrap();
    ix.update(fd.as_fd(), "pets/zebras.md").unwrap();
    assert_eq!(q("zebras")[0].path, "pets/zebras.md");
    std::fs::remove_dir_all(ws.join("pets")).unwrap();
    ix.forget("pets", true).unwrap();
    assert!(q("zebras").is_empty());
    // A symlink is not followed out of the workspace.
    write(tmp.path(), "outside.md", "secret outside words");
    std::os::unix::fs::symlink(tmp.path().join("outside.md"), ws.join("link.md")).unwrap();
    ix.update(fd.as_fd(), "link.md").unwrap();
    assert!(q("outside").is_empty());
}

#[test]
fn unreadable_hits_are_never_shown() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    corpus(&ws);
    write(
        &ws,
        "private/plan.md",
        "# Plan\n\nquarterly revenue secret plan\n",
    );
    let (ix, _) = hashing_index(&tmp.path().join("ix"), 128);
    let fd = ws_fd(&ws);
    ix.rescan(fd.as_fd(), &mut |_, _| {}).unwrap();
    let no_private = |p: &str| !p.starts_with("private/");
    for mode in [Mode::Text, Mode::Vector, Mode::Hybrid] {
        let hits = ix
            .query(&query(&fd, "quarterly revenue", mode, &no_private))
            .unwrap();
        assert!(
            hits.iter().all(|h| !h.path.starts_with("private/")),
            "{mode:?}: {hits:?}"
        );
    }
}

#[test]
fn a_lost_or_corrupt_index_is_rebuilt() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    let ixdir = tmp.path().join("ix");
    corpus(&ws);
    let open = || hashing_index(&ixdir, 128);
    let (ix, _) = open();
    ix.rescan(ws_fd(&ws).as_fd(), &mut |_, _| {}).unwrap();
    drop(ix);
    // The graph file gone: rebuilt from SQLite, no rescan needed.
    std::fs::remove_file(ixdir.join("hnsw.usearch")).unwrap();
    let (ix, fresh) = open();
    assert!(!fresh);
    assert_eq!(ix.counts().unwrap().2, 3);
    ix.save_graph().unwrap();
    drop(ix);
    // Garbage in the graph file: rebuilt too.
    std::fs::write(ixdir.join("hnsw.usearch"), b"not a graph").unwrap();
    let (ix, _) = open();
    assert_eq!(ix.counts().unwrap().2, 3);
    drop(ix);
    // A corrupt database: moved aside, started afresh (and rescanned by its owner).
    for f in ["index.db-wal", "index.db-shm"] {
        let _ = std::fs::remove_file(ixdir.join(f));
    }
    std::fs::write(ixdir.join("index.db"), vec![0x5a; 8192]).unwrap();
    let (ix, fresh) = open();
    assert!(fresh);
    ix.rescan(ws_fd(&ws).as_fd(), &mut |_, _| {}).unwrap();
    assert_eq!(ix.counts().unwrap().0, 3);
    // Another embedder: the old vectors are not mixed in.
    drop(ix);
    let (ix, fresh) = hashing_index(&ixdir, 256);
    assert!(fresh);
    assert_eq!(ix.counts().unwrap(), (0, 0, 0));
}

/// Many unreadable matches do not crowd the readable ones out of the limit, and text scores do
/// not carry how often a word occurs in unreadable files.
#[test]
fn unreadable_matches_change_neither_the_hits_nor_the_scores() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    for i in 0..300 {
        write(
            &ws,
            &format!("hidden/h{i}.md"),
            "mooseword mooseword in a hidden file\n",
        );
    }
    write(&ws, "mine/a.md", "mooseword once\n");
    write(&ws, "mine/probe.md", "probe xylophoneword\n");
    let (ix, _) = hashing_index(&tmp.path().join("ix"), 128);
    let fd = ws_fd(&ws);
    ix.rescan(fd.as_fd(), &mut |_, _| {}).unwrap();
    let mine = |p: &str| p.starts_with("mine/");
    for mode in [Mode::Text, Mode::Vector, Mode::Hybrid] {
        let mut q = query(&fd, "mooseword", mode, &mine);
        q.limit = 1;
        let hits = ix.query(&q).unwrap();
        assert_eq!(hits.len(), 1, "{mode:?}: {hits:?}");
        assert!(hits[0].path.starts_with("mine/"), "{mode:?}: {hits:?}");
    }
    let score = |t: &str| ix.query(&query(&fd, t, Mode::Text, &mine)).unwrap()[0].score;
    assert_eq!(score("mooseword"), 1.0);
    assert_eq!(score("xylophoneword"), 1.0);
    // Punctuation only: no word to look for, no error.
    assert!(ix
        .query(&query(&fd, "\"*(", Mode::Text, &mine))
        .unwrap()
        .is_empty());
}

/// A file swapped in at an indexed path (same size, mtime set back) does not inherit the
/// indexed file's chunks: not at query time, and not after the next update either.
#[test]
fn a_swapped_file_does_not_inherit_chunks() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    write(&ws, "victim.txt", "alice ibexword private\n");
    let (ix, _) = hashing_index(&tmp.path().join("ix"), 128);
    let fd = ws_fd(&ws);
    ix.rescan(fd.as_fd(), &mut |_, _| {}).unwrap();
    let meta = std::fs::metadata(ws.join("victim.txt")).unwrap();
    std::fs::rename(ws.join("victim.txt"), ws.join("victim.orig")).unwrap();
    std::fs::write(ws.join("victim.txt"), "z".repeat(meta.len() as usize)).unwrap();
    let f = std::fs::File::options()
        .write(true)
        .open(ws.join("victim.txt"))
        .unwrap();
    f.set_modified(meta.modified().unwrap()).unwrap();
    let q = || {
        ix.query(&query(&fd, "ibexword", Mode::Text, &everything))
            .unwrap()
    };
    assert!(q().is_empty(), "before the indexer saw the swap");
    assert!(
        ix.update(fd.as_fd(), "victim.txt").unwrap(),
        "the swap is a change"
    );
    assert!(q().is_empty(), "after");
}

/// The built-in model finds notes by meaning where words alone cannot: over the queries of the
/// retrieval set that share few words with their note, vector and hybrid search rank it in the
/// top three far more often than text search. (The figures, per mode, are in
/// docs/benchmarks.md; `cargo run --release --example retrieval_quality` prints them.)
#[test]
fn vector_and_hybrid_find_notes_by_meaning_where_text_cannot() {
    use clawfs_search::quality::RetrievalSet;
    let set = RetrievalSet::builtin();
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    set.write_to(&ws).unwrap();
    let embedder: Arc<dyn Embedder> = Arc::new(model());
    let (ix, _) = WorkspaceIndex::open(
        "ws",
        &IndexFiles::private(&tmp.path().join("ix")).unwrap(),
        256,
        HnswParams::default(),
        Some(embedder),
    )
    .unwrap();
    let fd = ws_fd(&ws);
    ix.rescan(fd.as_fd(), &mut |_, _| {}).unwrap();
    let score = |mode| {
        set.evaluate(&ix, fd.as_fd(), mode, Some("meaning"))
            .unwrap()
    };
    let (text, vector, hybrid) = (score(Mode::Text), score(Mode::Vector), score(Mode::Hybrid));
    eprintln!("text {text:?}\nvector {vector:?}\nhybrid {hybrid:?}");
    assert!(
        text.hit_at_3 < 0.35,
        "text finds meaning-only queries: {text:?}"
    );
    assert!(vector.hit_at_3 >= 0.6, "{vector:?}");
    assert!(hybrid.hit_at_3 >= 0.6, "{hybrid:?}");
    assert!(vector.mrr > text.mrr + 0.3 && hybrid.mrr > text.mrr + 0.3);
    // On a note's own rare words, text search is right, and hybrid keeps it.
    let keyword = |mode| {
        set.evaluate(&ix, fd.as_fd(), mode, Some("keyword"))
            .unwrap()
    };
    assert_eq!(keyword(Mode::Text).hit_at_1, 1.0);
    assert!(keyword(Mode::Hybrid).hit_at_1 >= 0.8);
}

/// The built-in model's 256 components in a 1,536-component workspace make a graph 256 wide
/// (a sixth of the work per distance); an imported embedding of another model that uses all
/// 1,536 makes the graph rebuild itself wider, and meaning is still found.
#[test]
fn the_graph_is_as_wide_as_its_vectors_and_grows_for_wider_ones() {
    use clawfs_search::import::{Document, Placed, Progress};
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    corpus(&ws);
    let embedder: Arc<dyn Embedder> = Arc::new(model().with_dimension(1536));
    let files = IndexFiles::private(&tmp.path().join("ix")).unwrap();
    let open = || {
        WorkspaceIndex::open(
            "ws",
            &files,
            1536,
            HnswParams::default(),
            Some(Arc::clone(&embedder)),
        )
        .unwrap()
        .0
    };
    let ix = open();
    let fd = ws_fd(&ws);
    ix.rescan(fd.as_fd(), &mut |_, _| {}).unwrap();
    let width = || {
        usearch::Index::metadata(files.graph.to_str().unwrap())
            .unwrap()
            .dimensions
    };
    assert_eq!(width(), 256);
    let feline = |ix: &WorkspaceIndex| {
        ix.query(&query(
            &fd,
            "small feline napping",
            Mode::Vector,
            &everything,
        ))
        .unwrap()[0]
            .path
            .clone()
    };
    assert_eq!(feline(&ix), "pets/cats.md");

    let wide: Vec<f32> = (0..1536).map(|i| (i % 7) as f32 - 3.0).collect();
    let doc = Document {
        source_id: "1".into(),
        workspace_id: "w".into(),
        content: "imported".into(),
        metadata: None,
        embedding: Some(wide),
        created_at: None,
    };
    let placed = Placed {
        path: "imported/1.md".into(),
        stamp: clawfs_search::index::FileStamp {
            size: 0,
            mtime_ns: 0,
            ino: 0,
            ctime_ns: 0,
        },
    };
    ix.import("k", &[(doc, placed)], "another-model", &Progress::default())
        .unwrap();
    assert_eq!(ix.counts().unwrap().2, 4);
    assert_eq!(feline(&ix), "pets/cats.md");
    ix.save_graph().unwrap();
    assert_eq!(width(), 1536);
    drop(ix);
    let ix = open();
    assert_eq!(ix.counts().unwrap().2, 4);
    assert_eq!(feline(&ix), "pets/cats.md");
}
