//! Test tools that need more of WASI than the preview 1 adapter gives: made into components
//! here from their WAT and the WIT world they import (`tools/wasm/testdata/NAME.wit`). Shared
//! with the end-to-end tests.

use std::path::Path;

/// `DIR/NAME.wat`, with each `(key, value)` put in for its placeholder, made into a component
/// of the world `NAME` of `DIR/NAME.wit` (`dir`: `tools/wasm/testdata`).
pub fn component_of_world(dir: &Path, name: &str, fill: &[(&str, String)]) -> Vec<u8> {
    let mut text = std::fs::read_to_string(dir.join(format!("{name}.wat"))).unwrap();
    for (key, value) in fill {
        text = text.replace(key, value);
    }
    let mut module = wat::parse_str(&text).unwrap_or_else(|e| panic!("{name}.wat: {e}"));
    let mut resolve = wit_parser::Resolve::default();
    let (pkg, _) = resolve
        .push_path(dir.join(format!("{name}.wit")))
        .unwrap_or_else(|e| panic!("{name}.wit: {e:#}"));
    let world = resolve.select_world(&[pkg], Some(name)).unwrap();
    wit_component::embed_component_metadata(
        &mut module,
        &resolve,
        world,
        wit_component::StringEncoding::UTF8,
        false,
    )
    .unwrap();
    wit_component::ComponentEncoder::default()
        .module(&module)
        .unwrap()
        .validate(true)
        .encode()
        .unwrap_or_else(|e| panic!("{name}: {e:#}"))
}
