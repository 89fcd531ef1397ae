//! The tool registry served as `<mount>/tools/registry.json` and `definitions/tool-<name>.json`:
//! every tool with a JSON Schema of its arguments and of its result, generated from the very types
//! the dispatcher parses and returns.

use std::path::Path;

use serde_json::{json, Value};

use crate::error::ERROR_CODES;
use crate::tools::{annotations, schemas, TOOL_NAMES};

/// Adds the `ok` field every response carries to a result schema.
fn with_ok(mut schema: Value) -> Value {
    if let Some(obj) = schema.as_object_mut() {
        if let Some(Value::Object(props)) = obj.get_mut("properties") {
            let mut with = serde_json::Map::new();
            with.insert(
                "ok".into(),
                json!({"const": true, "description": "Always true on success; errors are {\"ok\": false, \"error\": code, \"message\": ...}."}),
            );
            with.append(props);
            *props = with;
        }
        match obj.get_mut("required") {
            Some(Value::Array(r)) => r.insert(0, json!("ok")),
            _ => {
                obj.insert("required".into(), json!(["ok"]));
            }
        }
    }
    schema
}

/// The definition of one tool: `{"name", "description", "input_schema", "output_schema",
/// "annotations"}`, or `None` for an unknown name. `input_schema` is in the shape model APIs
/// take for tool arguments; it names `workspace`, which every call through the mount takes.
pub fn definition(tool: &str) -> Option<Value> {
    let (desc, args, result) = schemas(tool)?;
    let mut input = args;
    if let Some(o) = input.as_object_mut() {
        o.remove("$schema");
        o.remove("title");
        o.remove("description");
        let props = o
            .entry("properties")
            .or_insert_with(|| json!({}))
            .as_object_mut();
        if let Some(props) = props {
            props.insert(
                "workspace".into(),
                json!({
                    "type": "string",
                    "description": "The workspace to work in (a folder of /workspaces); default: \"default\".",
                }),
            );
        }
    }
    let mut output = with_ok(result);
    if let Some(o) = output.as_object_mut() {
        o.remove("$schema");
        o.remove("title");
    }
    Some(json!({
        "name": tool,
        "description": desc,
        "input_schema": input,
        "output_schema": output,
        "annotations": annotations(tool),
    }))
}

/// The whole registry: protocol summary, error codes, limits and every tool's definition. Its
/// protocol names the tool files under `mount`, where the registry is served.
pub fn registry(mount: &Path) -> Value {
    let tools = mount.join("tools");
    let tools = tools.display();
    json!({
        "name": "clawfs-agent-tools",
        "version": env!("CARGO_PKG_VERSION"),
        "protocol": {
            "call": format!("Open {tools}/call/<tool> read-write, write the arguments as one JSON object, read the JSON response from the same descriptor."),
            "requests": format!("Or write {{\"tool\": \"<tool>\", ...arguments}} to {tools}/requests/<id>.json and read {tools}/responses/<id>.json after closing it."),
            "response": "{\"ok\": true, ...result fields} or {\"ok\": false, \"error\": \"<code>\", \"message\": \"<what to do>\", ...}.",
            "paths": "Workspace-relative (\"notes/plan.md\"); a leading \"/\" means the workspace root. Read tools match names case-insensitively when the exact path does not exist.",
        },
        "error_codes": ERROR_CODES,
        "limits": crate::Limits::default(),
        "tools": TOOL_NAMES.iter().filter_map(|t| definition(t)).collect::<Vec<_>>(),
        "lean_tools": crate::LEAN_TOOLS,
    })
}
